-- reserve.lua: reserve units of an item for an order, on the buyer's home
-- bucket, in one step: replay a known order, check the per-buyer limit,
-- check the stock, deduct, and hold the units until a deadline.
--
-- KEYS     the bucket's three keys (records.lua)
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
--   {-4, deadline}                the order's units are claimed here and no
--                                 bucket holds them yet (another call is
--                                 reserving it, or one failed mid-way): the
--                                 caller may resume with take.lua and
--                                 settle.lua until deadline
--   {-5, deadline}                not enough stock here: the units are
--                                 claimed against the buyer until deadline;
--                                 take them from another bucket (take.lua)
--                                 and settle the claim here (settle.lua)
--   {-6, n} / {-7}                route again with n buckets / no such item
--
-- The order record is checked first, so a retry of an order that got its
-- units is answered with them even when the item has sold out since. The
-- common path is four calls (HMGET, TIME, HSET, ZADD) and builds none of
-- the records.lua helpers.
local order, buyer, q = ARGV[1], ARGV[2], tonumber(ARGV[3])
local s = redis.call('HMGET', KEYS[1], 'n', 'k', 'limit', 'available', 'held', 'o:' .. order, 'b:' .. buyer)
if not s[1] then
  return {-7}
end
if s[1] ~= ARGV[5] then
  return {-6, tonumber(s[1])}
end

if s[6] then
  local R = records()
  local r = R.decode(s[6])
  if r.buyer ~= buyer or r.q ~= q then
    return {-3}
  end
  if r.st == R.CLAIMED then
    return {-4, r.deadline}
  end
  return {2, r.deadline, r.stock, R.STATE_CODE[r.st]}
end

local self, limit = tonumber(s[2]), tonumber(s[3])
local available, held, used = tonumber(s[4]), tonumber(s[5]), tonumber(s[7]) or 0
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if held > 0 and (available < q or (limit > 0 and used + q > limit)) then
  -- Holds that ran out count as held until swept. Sweep a few here, so
  -- their units (and their buyers' allowances) come back without waiting
  -- for Sweep.
  local units, claims = records().sweep(now, 16, self, limit)
  if units + claims > 0 then
    s = redis.call('HMGET', KEYS[1], 'available', 'held', 'b:' .. buyer)
    available, held, used = tonumber(s[1]), tonumber(s[2]), tonumber(s[3]) or 0
  end
end
if limit > 0 and used + q > limit then
  return {-2, used}
end

local deadline = now + tonumber(ARGV[4])
local state, stock = 'H', self
if available >= q then
  available, held = available - q, held + q
elseif ARGV[5] == '1' then
  return {-1}
else
  -- Claim the units against the buyer here, where the limit is kept,
  -- before another bucket hands them out. If the caller never settles the
  -- claim, it ends at the deadline like a hold.
  state, stock = 'P', -1
end
-- The record format is records.lua's encode(), written out here.
local rec = state .. '|' .. ARGV[3] .. '|' .. stock .. '|' .. self .. '|' .. string.format('%d', deadline) .. '|' .. buyer
if limit > 0 then
  redis.call('HSET', KEYS[1], 'available', available, 'held', held, 'o:' .. order, rec, 'b:' .. buyer, used + q)
else
  redis.call('HSET', KEYS[1], 'available', available, 'held', held, 'o:' .. order, rec)
end
redis.call('ZADD', KEYS[2], deadline, order)
if state == 'P' then
  return {-5, deadline}
end
return {1, deadline, self}
