-- drop.lua deletes one shard of a Bloom filter: its meta hash and bitmaps.
--
-- KEYS[1]    the shard's meta hash (see common.lua)
-- KEYS[1+j]  the bitmap of layer j, j = 1..L
-- ARGV[1]    the filter's parameter string
-- ARGV[2]    L, the number of layer keys sent
--
-- Reply: {0, layers}; {1} if the stored parameters differ (another
-- filter's data: nothing deleted); {2, layers} if the shard has more
-- layers than L (nothing deleted).

local layers, count = shard(false, false)
if not layers then
  return count -- not a count: the reply that ends the script (see shard)
end
redis.call('DEL', unpack(KEYS))
return {0, layers}
