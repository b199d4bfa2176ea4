-- add_fixed.lua adds items to one shard of a fixed-size filter (one
-- layer), and says which were new (set at least one bit that was 0). It is
-- add.lua without the layers, for the common case: the parameter check and
-- k SETBITs per item, and one command to keep or find the reply.
--
-- KEYS[1]   the shard's meta hash (see common.lua)
-- KEYS[2]   the shard's bitmap
-- KEYS[3]   this call's own reply key (a random name on the shard's tag)
-- ARGV[1]   the filter's parameter string
-- ARGV[2]   k, the bit positions per item
-- ARGV[3]   how long to keep the reply, in milliseconds
-- ARGV[4..] each item's k positions, item after item
--
-- Reply: an array with 1 for each item that was new and 0 for each that
-- was not; or {-1} if the stored parameters differ, and nothing written.
--
-- go-redis sends a call again when its reply is lost, and the second run
-- finds every item present. So a reply with a new item is kept in KEYS[3]
-- (as a string of its 0s and 1s), and a run with no new item looks there
-- for the reply of an earlier run of the same call. A reply with no new
-- item needs no keeping: bits are only ever set, so a second run finds
-- every item present again and gives the same reply.

local stored = redis.call('HGET', KEYS[1], 'params')
if not stored then
  redis.call('HSET', KEYS[1], 'params', ARGV[1], 'layers', 1)
elseif stored ~= ARGV[1] then
  return {-1}
end

local key, k = KEYS[2], tonumber(ARGV[2])
local reply, fresh = {}, false
for at = 4, #ARGV, k do
  local new = 0
  for p = at, at + k - 1 do
    if redis.call('SETBIT', key, ARGV[p], 1) == 0 then
      new = 1
    end
  end
  reply[#reply + 1] = new
  fresh = fresh or new == 1
end
if fresh then
  redis.call('SET', KEYS[3], table.concat(reply), 'PX', ARGV[3])
  return reply
end
local kept = redis.call('GET', KEYS[3])
if kept then
  -- For a further resend, should this reply be lost too. (GETEX would
  -- do both, but costs more than GET on the common path: no reply kept.)
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
  for i = 1, #kept do
    reply[i] = string.byte(kept, i) - 48
  end
end
return reply
