-- cancel.lua: give a held order's units back to stock, once. Decided on
-- the bucket that holds the units, like confirm.lua and the sweep.
--
-- KEYS     the bucket's three keys (records.lua)
-- ARGV[1]  order id
-- ARGV[2]  buyer
-- ARGV[3]  the number of buckets the caller routed with
-- ARGV[4]  (optional) a Reserve walk's token: it gives back a hold it took
--          for a claim it then lost (reserve.go's settle), if this walk
--          made the hold and no walk has taken it over since (take.lua);
--          else the hold is left to end at its deadline, if no attempt of
--          the order settles onto it first. A hold given back so is
--          forgotten with its order (below)
--
-- Reply, an array of integers:
--   {1}            returned (now, or already before)
--   {-4}           the order is still being reserved (its claim's deadline
--                  has not passed)
--   {-9}           no such order for this buyer
--   {-10, bucket}  this is the buyer's home, the units are in bucket: ask it
--   {-12}          the order was sold (confirmed) before
--   {-14}          (with ARGV[4]) a walk took the hold over: kept
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
  return {1}
end
if r.st == R.RETURNED then
  return {1}
end
if r.st == R.SOLD then
  return {-12}
end
if r.stock ~= self then
  return {-10, r.stock}
end
-- A hold some walk found and took over may be reported held by any
-- attempt of the order that settled onto it, now or later: giving it back
-- would make that report false, so only the walk that made the hold, and
-- only while no walk has taken it over, may give it back.
if ARGV[4] then
  local mark = redis.call('HGET', KEYS[1], 'a:' .. order)
  if mark and mark ~= 'c' .. ARGV[4] then
    return {-14}
  end
  if r.home ~= self then
    -- Nobody reported this hold: its maker lost the settle, and no walk
    -- took it over. The bucket forgets the order, as a refusal is
    -- forgotten, so that a retry may take units here afresh; a returned
    -- record would answer it "returned" for an order never reserved. The
    -- home never recorded this bucket for it and needs no news.
    redis.call('HINCRBY', KEYS[1], 'available', r.q)
    redis.call('HINCRBY', KEYS[1], 'ret', 1)
    redis.call('HINCRBY', KEYS[1], 'held', -r.q)
    redis.call('HDEL', KEYS[1], 'o:' .. order, 'a:' .. order)
    redis.call('ZREM', KEYS[2], order)
    return {1}
  end
end
R.give_back(order, r, self, limit)
return {1}
