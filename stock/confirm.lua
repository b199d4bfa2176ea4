-- confirm.lua: mark a held order sold (paid). Confirm, cancel and the
-- sweep decide on the bucket that holds the units, so exactly one of them
-- wins; a hold whose deadline has passed is returned, not sold.
--
-- KEYS     the bucket's three keys (records.lua)
-- ARGV[1]  order id
-- ARGV[2]  buyer
-- ARGV[3]  the number of buckets the caller routed with
--
-- Reply, an array of integers:
--   {1}            sold (now, or already before)
--   {-4}           the order is still being reserved (its claim's deadline
--                  has not passed)
--   {-9}           no such order for this buyer
--   {-10, bucket}  this is the buyer's home, the units are in bucket: ask it
--   {-11}          the hold was returned (cancelled or expired) before
--   {-6, n} / {-7} route again with n buckets / no such item
local R = records()
local self, limit, _, err = R.check_bucket(ARGV[3])
if err then
  return err
end
local order = ARGV[1]
local r = R.record(order)
if not r or r.buyer ~= ARGV[2] then
  return {-9}
end
if r.st == R.CLAIMED then
  if r.deadline > R.now_ms() then
    return {-4}
  end
  -- Past its deadline a claim is over, settled or not: end it as the
  -- sweep would (any hold taken for it ends with it) and answer for the
  -- order returned.
  R.end_claim(order, r, limit)
  return {-11}
end
if r.st == R.SOLD then
  return {1}
end
if r.st == R.RETURNED then
  return {-11}
end
if r.stock ~= self then
  return {-10, r.stock}
end
if r.deadline <= R.now_ms() then
  R.give_back(order, r, self, limit)
  return {-11}
end
r.st = R.SOLD
redis.call('HINCRBY', KEYS[1], 'held', -r.q)
redis.call('HINCRBY', KEYS[1], 'sold', r.q)
redis.call('HSET', KEYS[1], 'o:' .. order, R.encode(r))
redis.call('ZREM', KEYS[2], order)
if r.home ~= self then
  redis.call('RPUSH', KEYS[3], order .. '|' .. r.home .. '|' .. R.SOLD .. '|' .. self)
  redis.call('HDEL', KEYS[1], 'a:' .. order) -- the hold's maker mark (take.lua)
end
return {1}
