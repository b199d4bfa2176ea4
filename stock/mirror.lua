-- mirror.lua: apply, in the buyer's home bucket, what the bucket holding
-- an order's units decided (sold or returned), and release the buyer's
-- allowance for returned units. Repeating it changes nothing.
--
-- KEYS     the home bucket's three keys (records.lua)
-- ARGV[1]  order id
-- ARGV[2]  the new state: S or R
-- ARGV[3]  the number of buckets the caller routed with
-- ARGV[4]  the index of the bucket that decided it: only the bucket the
--          home records as holding the units is heeded (a bucket that held
--          them for a call that lost the race to settle is not)
--
-- Reply: {1} applied; {0} nothing to do (already applied, or not an order
-- of this home held in that bucket); {-4} not yet: the order's claim is
-- still open here, keep the news; {-6, n} / {-7} as elsewhere.
--
-- Why {-4}: a bucket can return a hold it took for a claim that was never
-- settled (the caller died, or is slow, and the deadline passed). The home
-- cannot tell yet whether the claim will be settled onto that bucket (a
-- late settle, or a retry resuming it, where clocks differ between nodes),
-- so the news stays in the outbox until the claim is settled (then it
-- applies) or ends (then it is moot). Dropping it would leave a claim
-- settled onto a returned hold counted against its buyer forever.
local R = records()
local self, limit, _, err = R.check_bucket(ARGV[3])
if err then
  return err
end
local order, state = ARGV[1], ARGV[2]
local r = R.record(order)
if r and r.home == self and r.st == R.CLAIMED then
  return {-4}
end
if not r or r.home ~= self or r.stock ~= tonumber(ARGV[4]) or r.stock == self or r.st ~= R.HELD then
  return {0}
end
r.st = state
redis.call('HSET', KEYS[1], 'o:' .. order, R.encode(r))
if state == R.RETURNED then
  R.release_buyer(limit, r.buyer, r.q)
end
return {1}
