-- fair_acquire.lua: take the lock in arrival order. The lock itself is the
-- same string as acquire.lua's; a fair acquisition also keeps a place in
-- the lock's queue and takes the lock only when it is free and the
-- caller's place is first.
--
-- KEYS[1]  lock key (see acquire.lua)
-- KEYS[2]  fence key (see fence.lua)
-- KEYS[3]  queue: sorted set, owner token -> arrival number
-- KEYS[4]  places: sorted set, owner token -> when its place expires (Redis ms)
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  "1" if the caller waits for a release message (the holder is
--          flagged with "+", as in acquire.lua), else "0"
-- ARGV[4]  place timeout in milliseconds: a waiter that does not come back
--          within it (it died, or gave up without leaving) loses its place
-- ARGV[5]  "1" to take (or keep) a place when the lock cannot be had now,
--          "0" to leave none (a single attempt)
--
-- Reply: a positive fence when the lock is obtained; r <= -1 otherwise,
-- with -r-2 the milliseconds worth waiting before the next attempt (the
-- holder's lease, or the time the first waiter's place has left).

local now = now_ms()

-- Waiters that stopped coming back lose their places first.
drop_gone(KEYS[3], KEYS[4], now)

local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] or holder == ARGV[1] .. '+' then
  -- Already ours: this is a resend of an attempt whose reply was lost, or
  -- the attempt of a waiter that was handed the lock by a release whose
  -- reply was lost. The caller starts its lease from this attempt, later
  -- than the handover, so the lease restarts here: the caller's deadline
  -- must never outlast the key.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return current_fence(KEYS[2])
end
local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
if not holder and (not first or first == ARGV[1]) then
  return take(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])
end

-- Not now: hold (or keep) a place at the back, and come back within the
-- place timeout.
local placeTimeout = tonumber(ARGV[4])
if ARGV[5] == '1' then
  hold_place(KEYS[3], KEYS[4], ARGV[1], now, placeTimeout)
end
if holder then
  return busy(KEYS[1], holder, ARGV[3])
end
-- Free, but another waiter is first: it has until its place expires.
local expires = tonumber(redis.call('ZSCORE', KEYS[4], first)) or now
return -math.max(expires - now, 0) - 2
