-- add_fixed.lua adds items to one shard of a fixed-size filter (one
-- layer), and says which were new (set at least one bit that was 0). It is
-- add.lua without the layers, for the common case: the parameter check and
-- k SETBITs per item.
--
-- KEYS[1]   the shard's meta hash (see common.lua)
-- KEYS[2]   the shard's bitmap
-- ARGV[1]   the filter's parameter string
-- ARGV[2]   k, the bit positions per item
-- ARGV[3..] each item's k positions, item after item
--
-- Reply: an array with 1 for each item that was new and 0 for each that
-- was not; or {-1} if the stored parameters differ, and nothing written.
--
-- A second run of a call (go-redis resends a command whose reply was
-- lost) finds every item present and answers 0 for each: the caller,
-- which knows when its command was written twice (script.SendCount),
-- reports those answers as unknown (see add.lua).

local stored = redis.call('HGET', KEYS[1], 'params')
if not stored then
  redis.call('HSET', KEYS[1], 'params', ARGV[1], 'layers', 1)
elseif stored ~= ARGV[1] then
  return {-1}
end

local key, k = KEYS[2], tonumber(ARGV[2])
local reply = {}
for at = 3, #ARGV, k do
  local new = 0
  for p = at, at + k - 1 do
    if redis.call('SETBIT', key, ARGV[p], 1) == 0 then
      new = 1
    end
  end
  reply[#reply + 1] = new
end
return reply
