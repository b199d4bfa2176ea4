-- versioned_common.lua: prepended to the versioned-value scripts
-- (scripts.go).
--
-- current_version reads the version of the value at key as its two parts,
-- us and seq (see versioned_set.lua): 0, 0 and ver false when the value
-- does not exist. It returns an error reply as a fourth value when key
-- holds something else, which the caller returns as is. The fifth is the
-- token of the call that wrote the value (field w; false for a value
-- written before the field was kept), read in the same command.
--
-- A deleted value leaves a tombstone for a while (versioned_delete.lua):
-- the hash keeps w and c and holds the deleted version in dver instead of
-- ver (so that code reading ver takes it for no value, or for no
-- versioned value, never for a live one), and no data. It reads as a value
-- that does not exist, with the fifth value the token of its last write,
-- a sixth, the deleted version's parts {us, seq}, which a new value's
-- version must pass, and a seventh, the token of the write that created
-- it (field c).
local function current_version(key)
  local got = redis.call('HMGET', key, 'ver', 'w', 'dver', 'c')
  local ver = got[1] or got[3]
  if ver then
    local u, s = string.match(ver, '^(%d+)(%d%d%d)$')
    if not u then
      return 0, 0, ver, redis.error_reply('counter: ' .. key .. ' has a malformed version')
    end
    if not got[1] then
      return 0, 0, false, nil, got[2], {tonumber(u), tonumber(s)}, got[4]
    end
    return tonumber(u), tonumber(s), ver, nil, got[2], nil, got[4]
  end
  if redis.call('EXISTS', key) == 1 then
    return 0, 0, false, redis.error_reply('WRONGTYPE counter: ' .. key .. ' is not a versioned value')
  end
  return 0, 0, false
end
