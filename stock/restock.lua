-- restock.lua: add units to a bucket's stock.
--
-- KEYS     the bucket's three keys (records.lua)
-- ARGV[1]  units to add (> 0)
-- ARGV[2]  the number of buckets the caller routed with
-- ARGV[3]  the restock's id, random per Restock call
--
-- Reply: {1}; or {-6, n} / {-7}.
--
-- go-redis resends a command whose reply was lost, and a second run would
-- add the units twice: phantom stock, an oversell. The id, kept in the
-- bucket as "r:<id>" for as long as the item lives, makes the second run
-- a no-op. Restocks are rare, so the fields stay few.
local R = records()
local _, _, _, err = R.check_bucket(ARGV[2])
if err then
  return err
end
if redis.call('HSETNX', KEYS[1], 'r:' .. ARGV[3], 1) == 0 then
  return {1}
end
redis.call('HINCRBY', KEYS[1], 'total', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'available', ARGV[1])
return {1}
