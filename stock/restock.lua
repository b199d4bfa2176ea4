-- restock.lua: add units to a bucket's stock.
--
-- KEYS     the bucket's three keys (records.lua)
-- ARGV[1]  units to add (> 0)
-- ARGV[2]  the number of buckets the caller routed with
-- ARGV[3]  the restock's id, random per Restock call
-- ARGV[4]  the most units a bucket may count (MaxUnits: Lua numbers are
--          exact integers only up to 2^53)
--
-- Reply: {1}; {-13} when the bucket's total would pass ARGV[4], and
-- nothing is added; or {-6, n} / {-7}.
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
local s = redis.call('HMGET', KEYS[1], 'r:' .. ARGV[3], 'total')
if s[1] then
  return {1}
end
-- Both terms are at most 2^53 - 1, so their sum, even rounded to a
-- double, compares with that bound exactly.
if tonumber(s[2]) + tonumber(ARGV[1]) > tonumber(ARGV[4]) then
  return {-13}
end
redis.call('HSET', KEYS[1], 'r:' .. ARGV[3], 1)
redis.call('HINCRBY', KEYS[1], 'total', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'available', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'ret', 1)
return {1}
