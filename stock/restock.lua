-- restock.lua: add units to a bucket's stock.
--
-- KEYS     the bucket's three keys (records.lua)
-- ARGV[1]  units to add (> 0)
-- ARGV[2]  the number of buckets the caller routed with
--
-- Reply: {1}; or {-6, n} / {-7}.
local R = records()
local _, _, _, err = R.check_bucket(ARGV[2])
if err then
  return err
end
redis.call('HINCRBY', KEYS[1], 'total', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'available', ARGV[1])
return {1}
