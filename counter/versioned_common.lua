-- versioned_common.lua: prepended to the versioned-value scripts
-- (scripts.go).
--
-- current_version reads the version of the value at key as its two parts,
-- us and seq (see versioned_set.lua): 0, 0 and ver false when the value
-- does not exist. It returns an error reply as a fourth value when key
-- holds something else, which the caller returns as is. The fifth is the
-- token of the call that wrote the value (field w; false for a value
-- written before the field was kept), read in the same command.
local function current_version(key)
  local got = redis.call('HMGET', key, 'ver', 'w')
  local ver = got[1]
  if ver then
    local u, s = string.match(ver, '^(%d+)(%d%d%d)$')
    if not u then
      return 0, 0, ver, redis.error_reply('counter: ' .. key .. ' has a malformed version')
    end
    return tonumber(u), tonumber(s), ver, nil, got[2]
  end
  if redis.call('EXISTS', key) == 1 then
    return 0, 0, false, redis.error_reply('counter: ' .. key .. ' is not a versioned value')
  end
  return 0, 0, false
end
