-- settle.lua: end a claim in the buyer's home bucket once the other
-- buckets have answered: record where the units are held, or drop the claim
-- when none had them.
--
-- KEYS     the home bucket's three keys (records.lua)
-- ARGV[1]  order id
-- ARGV[2]  index of the bucket holding the units, or -1 if none had them
-- ARGV[3]  the number of buckets the caller routed with
--
-- Reply, an array of integers:
--   {1}            settled: the order is held in that bucket
--   {-1}           the claim is dropped and the buyer's allowance released
--   {-8, bucket, state}  the claim is no longer open: another call settled
--                  it (bucket holds the units; state 1 held, 2 sold, 3
--                  returned), or its deadline passed (bucket -1, state 3:
--                  it was swept, or is ended now). Unless bucket is the one
--                  this call took from, the caller gives back what it took
--   {-6, n} / {-7} route again with n buckets / no such item
local R = records()
local self, limit, _, err = R.check_bucket(ARGV[3])
if err then
  return err
end
local order, k = ARGV[1], tonumber(ARGV[2])
local r = R.record(order)
if not r or r.home ~= self then
  return {-8, -1, 3}
end
if r.st ~= R.CLAIMED then
  return {-8, r.stock, R.STATE_CODE[r.st]}
end
if r.deadline <= R.now_ms() then
  -- Too late: the hold taken for the claim has the same deadline, so it is
  -- returned, or will be at the next sweep of its bucket. Settling onto it
  -- would report a hold that is gone. End the claim as the sweep would.
  R.end_claim(order, r, limit)
  return {-8, -1, 3}
end
redis.call('ZREM', KEYS[2], order)
if k < 0 then
  -- Refusals are not remembered: a later retry of this order is a new try.
  redis.call('HDEL', KEYS[1], 'o:' .. order)
  R.release_buyer(limit, r.buyer, r.q)
  return {-1}
end
-- The holding bucket keeps the deadline from here on.
r.st, r.stock = R.HELD, k
redis.call('HSET', KEYS[1], 'o:' .. order, R.encode(r))
return {1}
