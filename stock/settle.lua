-- settle.lua: end a claim in the buyer's home bucket once the other
-- buckets have answered: record where the units are held, or drop the claim
-- when none had them.
--
-- KEYS     the home bucket's three keys (records.lua)
-- ARGV[1]  order id
-- ARGV[2]  index of the bucket holding the units; -1 to drop the claim;
--          -2 when no other bucket had them: hold them here if this
--          bucket has them now, else drop the claim
-- ARGV[3]  the number of buckets the caller routed with
-- ARGV[4]  with a bucket in ARGV[2]: the deadline of its hold (ms), the
--          claim's unless the call settles onto a hold another call's
--          claim took; with -1 or -2: the deadline of the caller's claim,
--          which tells it from a newer claim of another attempt of the
--          order (the caller's was dropped meanwhile): that one is left
--          alone, and the reply is {-8, -1, 3, 0}, as for a dropped claim.
--          Claims whose deadlines tie (both cut to the item's expiry, or
--          made in one millisecond with one hold) are not told apart
--
-- Reply, an array of integers:
--   {1, swept}     settled: the order is held in that bucket (with -2:
--                  here, until the claim's deadline)
--   {-1, swept}    the claim is dropped and the buyer's allowance released
--                  (swept, with -2: 1 if expired holds went back to stock
--                  here first, for the caller's sold-out cache)
--   {-8, bucket, state, deadline}  the claim is no longer open: another
--                  call settled it (bucket holds the units until deadline;
--                  state 1 held, 2 sold, 3 returned), or its deadline passed
--                  (bucket -1, state 3: it was swept, or is ended now), or
--                  the hold in ARGV[2] ended before the claim could be
--                  settled onto it (bucket ARGV[2], state 3: the claim is
--                  dropped). Unless bucket is the one this call took from,
--                  the caller gives back what it took
--   {-6, n} / {-7} route again with n buckets / no such item
local R = records()
local self, limit, _, err = R.check_bucket(ARGV[3])
if err then
  return err
end
local order, k = ARGV[1], tonumber(ARGV[2])
local r = R.record(order)
if not r or r.home ~= self then
  return {-8, -1, 3, 0}
end
if r.st ~= R.CLAIMED then
  return {-8, r.stock, R.STATE_CODE[r.st], r.deadline}
end
if k < 0 and ARGV[4] and tonumber(ARGV[4]) ~= r.deadline then
  return {-8, -1, 3, 0}
end
local now = R.now_ms()
if r.deadline <= now then
  -- Too late: the hold taken for the claim has the same deadline, so it is
  -- returned, or will be at the next sweep of its bucket. Settling onto it
  -- would report a hold that is gone. End the claim as the sweep would.
  R.end_claim(order, r, limit)
  return {-8, -1, 3, r.deadline}
end
local held_until = tonumber(ARGV[4])
if k >= 0 and held_until and held_until <= now then
  -- The hold another call's claim took, with an earlier deadline than
  -- this claim's, has ended since the caller saw it: settling onto it
  -- would report a hold that is gone. Drop the claim, as when no bucket
  -- had the units.
  redis.call('ZREM', KEYS[2], order)
  redis.call('HDEL', KEYS[1], 'o:' .. order)
  R.release_buyer(limit, r.buyer, r.q)
  return {-8, k, 3, held_until}
end
local swept = 0
if k == -2 then
  -- The other buckets were asked one after another, and units may have
  -- come back here meanwhile (a cancel, a sweep): a sold-out answer while
  -- this bucket has them would turn the buyer away for nothing. The claim
  -- becomes a hold here with its deadline, and its member in due is the
  -- hold's.
  local c = redis.call('HMGET', KEYS[1], 'available', 'held')
  local available, held = tonumber(c[1]), tonumber(c[2])
  -- Up to 64 holds that ran out are returned first, as in reserve.lua.
  local rounds, more = 0, true
  while more and rounds < 4 and available < r.q and held > 0 do
    local units, claims
    units, claims, more = R.sweep(now, 16, self, limit)
    if units > 0 then
      swept = 1
      c = redis.call('HMGET', KEYS[1], 'available', 'held')
      available, held = tonumber(c[1]), tonumber(c[2])
    end
    rounds = rounds + 1
  end
  if available >= r.q then
    r.st, r.stock = R.HELD, self
    redis.call('HSET', KEYS[1], 'available', available - r.q, 'held', held + r.q, 'o:' .. order, R.encode(r))
    return {1, swept}
  end
end
redis.call('ZREM', KEYS[2], order)
if k < 0 then
  -- Refusals are not remembered: a later retry of this order is a new try
  -- (the claim's member in due, left behind, cannot end that try's hold:
  -- the sweep heeds the record's own deadline).
  redis.call('HDEL', KEYS[1], 'o:' .. order)
  R.release_buyer(limit, r.buyer, r.q)
  return {-1, swept}
end
-- The holding bucket keeps the deadline from here on; the record says
-- the hold's.
r.st, r.stock = R.HELD, k
r.deadline = tonumber(ARGV[4]) or r.deadline
redis.call('HSET', KEYS[1], 'o:' .. order, R.encode(r))
return {1}
