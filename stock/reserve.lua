-- reserve.lua: reserve units of an item for an order, on the buyer's home
-- bucket, in one step: replay a known order, check the per-buyer limit,
-- check the stock, deduct, and hold the units until a deadline.
--
-- KEYS     the bucket's five keys (records.lua)
-- ARGV[1]  order id
-- ARGV[2]  buyer
-- ARGV[3]  quantity (> 0)
-- ARGV[4]  hold in milliseconds (> 0)
-- ARGV[5]  the number of buckets the caller routed with
--
-- Reply, an array of integers:
--   {1, deadline, bucket}         reserved: the units are held in this bucket
--                                 until deadline (ms, Redis clock)
--   {2, deadline, bucket, state}  the order was reserved before; nothing
--                                 changed (state 1 held, 2 sold, 3 returned)
--   {-1}                          not enough stock, and no other bucket
--   {-2, units}                   over the per-buyer limit (units: the
--                                 buyer's current count)
--   {-3}                          the order id is taken by another buyer or
--                                 quantity
--   {-4}                          another call is reserving this order now
--   {-5, deadline}                not enough stock here: the units are
--                                 claimed against the buyer until deadline;
--                                 take them from another bucket (take.lua)
--                                 and settle the claim here (settle.lua)
--   {-6, n} / {-7}                route again with n buckets / no such item
--
-- The order record is checked first, so a retry of an order that got its
-- units is answered with them even when the item has sold out since.
local self, limit, c, err = check_bucket(ARGV[5], 'available', 'held')
if err then
  return err
end
local order, buyer, q = ARGV[1], ARGV[2], tonumber(ARGV[3])

local v = redis.call('HGET', KEYS[2], order)
if v then
  local r = decode(v)
  if r.buyer ~= buyer or r.q ~= q then
    return {-3}
  end
  if r.st == CLAIMED then
    return {-4}
  end
  return {2, r.deadline, r.stock, STATE_CODE[r.st]}
end

if limit > 0 then
  local used = tonumber(redis.call('HGET', KEYS[3], buyer)) or 0
  if used + q > limit then
    return {-2, used}
  end
end

local available, held = tonumber(c[1]), tonumber(c[2])
local now = now_ms()
if available < q and held > 0 then
  -- Holds that ran out count as held until swept. Sweep a few here, so
  -- their units come back without waiting for Sweep.
  if sweep(now, 16, self, limit) > 0 then
    c = redis.call('HMGET', KEYS[1], 'available', 'held')
    available, held = tonumber(c[1]), tonumber(c[2])
  end
end

local deadline = now + tonumber(ARGV[4])
if available >= q then
  redis.call('HSET', KEYS[1], 'available', available - q, 'held', held + q)
  redis.call('HSET', KEYS[2], order, encode({st = HELD, q = q, stock = self, home = self,
    deadline = deadline, buyer = buyer}))
  redis.call('ZADD', KEYS[4], deadline, order)
  if limit > 0 then
    redis.call('HINCRBY', KEYS[3], buyer, q)
  end
  return {1, deadline, self}
end
if tonumber(ARGV[5]) == 1 then
  return {-1}
end

-- Claim the units against the buyer here, where the limit is kept, before
-- another bucket hands them out. If the caller never settles the claim, it
-- ends at the deadline like a hold.
redis.call('HSET', KEYS[2], order, encode({st = CLAIMED, q = q, stock = -1, home = self,
  deadline = deadline, buyer = buyer}))
redis.call('ZADD', KEYS[4], deadline, order)
if limit > 0 then
  redis.call('HINCRBY', KEYS[3], buyer, q)
end
return {-5, deadline}
