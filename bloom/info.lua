-- info.lua counts the set bits of each layer of one shard. Read-only.
--
-- KEYS[1]    the shard's meta hash (see common.lua)
-- KEYS[1+j]  the bitmap of layer j, j = 1..L
-- ARGV[1]    the filter's parameter string
-- ARGV[2]    L, the number of layer keys sent
--
-- Reply, integers:
--   {0, layers, count, bits_1, ..., bits_layers}  count: the last layer's
--                                                 items (scalable filters)
--   {1}          stored parameters differ
--   {2, layers}  the shard has more layers than L

local layers, count = shard(false, false)
if not layers then
  return count -- not a count: the reply that ends the script (see shard)
end
local reply = {0, layers, count}
for j = 1, layers do
  reply[#reply + 1] = redis.call('BITCOUNT', KEYS[1 + j])
end
return reply
