-- exists_fixed.lua reports which items may be in one shard of a
-- fixed-size filter (one layer): those whose k bits are all set. It is
-- exists.lua without the layers. Read-only.
--
-- KEYS[1]   the shard's meta hash (see common.lua)
-- KEYS[2]   the shard's bitmap
-- ARGV[1]   the filter's parameter string
-- ARGV[2]   k, the bit positions per item
-- ARGV[3..] each item's k positions, item after item
--
-- Reply: an array with 1 for each item that may be present and 0 for
-- each that is not; or {-1} if the stored parameters differ.

local stored = redis.call('HGET', KEYS[1], 'params')
local k = tonumber(ARGV[2])
if stored and stored ~= ARGV[1] then
  return {-1}
end

-- Stop at the first clear bit: an absent item costs about one read.
local key = KEYS[2]
local function has(at)
  for p = at, at + k - 1 do
    if redis.call('GETBIT', key, ARGV[p]) == 0 then
      return 0
    end
  end
  return 1
end
local reply = {}
for at = 3, #ARGV, k do
  reply[#reply + 1] = has(at)
end
return reply
