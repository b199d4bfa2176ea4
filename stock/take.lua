-- take.lua: hold units in this bucket for an order claimed in the buyer's
-- home bucket (reserve.lua replied -5 there).
--
-- KEYS     the bucket's three keys (records.lua)
-- ARGV[1]  order id
-- ARGV[2]  buyer
-- ARGV[3]  quantity
-- ARGV[4]  the claim's deadline (ms, Redis clock): the hold ends with it
-- ARGV[5]  the home bucket's index
-- ARGV[6]  the number of buckets the caller routed with
-- ARGV[7]  '1' to only look for the order here (a resumed claim, below),
--          '0' to take the units
-- ARGV[8]  taking: the token of the caller's walk, random (see below)
--
-- Reply, an array of integers (ret: the bucket's count of returns, see
-- records.lua):
--   {-9, ret}      looking: this bucket does not know the order
--   {1, swept}     held here until the deadline (swept: 1 if expired
--                  holds went back to stock here first, for the
--                  caller's sold-out cache)
--   {2, state, deadline}  this bucket already holds the order (a repeated
--                  call, state 1), or sold it (state 2: another call settled
--                  the claim here and the order was confirmed since), the
--                  hold ending at deadline: another call's claim's, which
--                  may not be this one's
--   {-1, ret, swept}  not enough stock here
--   {-3}           the order id is taken here by another order
--   {-8}           the claim is over: its deadline has passed, or this
--                  bucket's hold for the order ended (returned, or past its
--                  deadline and about to be)
--   {-6, n} / {-7} route again with n buckets / no such item
--
-- A call that resumes another's claim looks in every bucket before it
-- takes from any: the call that made the claim may have taken the units in
-- one and lost the reply, and a take from a bucket earlier in the walk
-- would then hold the order's units twice, the first hold keeping them from
-- every buyer until the deadline.
--
-- A take that makes a hold records its walk's token with it, in field
-- "a:<order id>" ("c" and the token). A take that finds the order already
-- held here by another walk takes the hold over: the field becomes "t"
-- and its own token (a resend of a walk's own take changes nothing). Only
-- the walk that made a hold, and only while no walk has taken it over,
-- gives it back when it loses its settle (cancel.lua): the attempt that
-- made the hold may have found its claim dropped and be about to give it
-- back, while the taker, or a later attempt, settles onto it and reports
-- it held. A hold nobody settles onto ends at its deadline. A walk
-- resuming a claim that found the hold by looking takes it over so, too,
-- before it settles.
--
-- A hold here that has ended is not replayed: the caller would settle the
-- claim onto it and report units held that are back in stock, and the
-- home, which cannot apply the news of a return while the claim is open
-- (mirror.lua), would count them against the buyer until it arrived.
local order, buyer, q, deadline = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local R = records()
local self, limit, c, err = R.check_bucket(ARGV[6], 'available', 'held', 'o:' .. order, 'ret', 'a:' .. order)
if err then
  return err
end
local now = R.now_ms()
if c[3] then
  local r = R.decode(c[3])
  if r.stock ~= self or r.buyer ~= buyer or r.q ~= q then
    return {-3}
  end
  if r.st == R.SOLD or (r.st == R.HELD and r.deadline > now) then
    if r.st == R.HELD and ARGV[7] ~= '1' and c[5] ~= 'c' .. ARGV[8] then
      redis.call('HSET', KEYS[1], 'a:' .. order, 't' .. ARGV[8])
    end
    return {2, R.STATE_CODE[r.st], r.deadline}
  end
  return {-8}
end
if ARGV[7] == '1' then
  return {-9, tonumber(c[4]) or 0}
end

if deadline <= now then
  return {-8}
end
local available, held = tonumber(c[1]), tonumber(c[2])
-- Up to 64 holds that ran out are returned first, as in reserve.lua.
local rounds, more, swept = 0, true, 0
while more and rounds < 4 and available < q and held > 0 do
  local units, claims
  units, claims, more = R.sweep(now, 16, self, limit)
  if units > 0 then
    swept = 1
    c = redis.call('HMGET', KEYS[1], 'available', 'held', 'o:' .. order, 'ret')
    available, held = tonumber(c[1]), tonumber(c[2])
  end
  rounds = rounds + 1
end
if available < q then
  return {-1, tonumber(c[4]) or 0, swept}
end
redis.call('HSET', KEYS[1], 'available', available - q, 'held', held + q, 'o:' .. order,
  R.encode({st = R.HELD, q = q, stock = self, home = tonumber(ARGV[5]), deadline = deadline, buyer = buyer}),
  'a:' .. order, 'c' .. ARGV[8])
redis.call('ZADD', KEYS[2], deadline, order)
return {1, swept}
