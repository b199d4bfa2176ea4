-- fair_release.lua: release.lua for a fair lock, which can also hand the
-- lock straight to the next waiter when the releasing process knows that
-- waiter is alive (it is one of its own goroutines, waiting).
--
-- KEYS[1]  lock key
-- KEYS[2]  queue (see fair_acquire.lua)
-- KEYS[3]  places
-- KEYS[4]  fence key (see fence.lua)
-- ARGV[1]  owner token
-- ARGV[2]  the token of a waiter to hand the lock to if it is first in
--          the queue, or '' to release
-- ARGV[3]  that waiter's lease in milliseconds
-- ARGV[4]  with a handover, the token of the waiter after it in the same
--          process, to be given a place in the queue, or ''
-- ARGV[5]  that waiter's place timeout in milliseconds
--
-- Reply: {code, fence, placed}. Code 0: not held; 1: released; 2: released
-- and the first waiter told on the channel KEYS[1] .. ':released'; 4:
-- handed to ARGV[2], whose fence is the second value; placed is 1 if
-- ARGV[4] was given its place; 5: not held by the owner, but by ARGV[2]
-- with the fence given, placed as for 4 (see below).
--
-- A release message names the first waiter in the queue, so that only
-- that waiter's process tries (the others would only renew their places),
-- instead of every waiting process at once. A handover skips that round:
-- the waiter does not have to hear of the release and try, which saves a
-- round trip per turn when the goroutines of one process queue for a lock.
-- It goes only to the first in line (after places that expired are
-- dropped), so the order is the queue's, as if the waiter had tried; and
-- only to a waiter its process vouches for, so the lock is never handed
-- to a dead one (a waiter of another process is told, not handed). The
-- handover also queues the process's next waiter, as that waiter's own
-- attempt would have on becoming the first of its process, so that it
-- need not try while the lock is held: it waits for the next handover.

local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] and v ~= ARGV[1] .. '+' then
  -- go-redis resends a command whose reply was lost: the first run may
  -- have handed the lock to ARGV[2]. Its token is random, so the lock
  -- holds it only if that waiter has it, by this handover or by its own
  -- attempt; either way it may be told so, with the current fence (5).
  -- The caller decides by its lease deadline whether this release did it.
  if ARGV[2] ~= '' and (v == ARGV[2] or v == ARGV[2] .. '+') then
    local placed = 0
    if ARGV[4] ~= '' and redis.call('ZSCORE', KEYS[2], ARGV[4]) then
      placed = 1
    end
    return {5, current_fence(KEYS[4]), placed}
  end
  return {0, 0, 0}
end

if ARGV[2] ~= '' then
  local now = now_ms()
  drop_gone(KEYS[2], KEYS[3], now)
  if redis.call('ZRANGE', KEYS[2], 0, 0)[1] == ARGV[2] then
    local placed = 0
    if ARGV[4] ~= '' then
      -- Before take, so that the new holder's lock is flagged: its
      -- release must tell the queue.
      hold_place(KEYS[2], KEYS[3], ARGV[4], now, tonumber(ARGV[5]))
      placed = 1
    end
    return {4, take(KEYS[1], KEYS[4], KEYS[2], KEYS[3], ARGV[2], ARGV[3]), placed}
  end
end

redis.call('DEL', KEYS[1])
if v == ARGV[1] then
  return {1, 0, 0}
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1] or ''
redis.call('PUBLISH', KEYS[1] .. ':released', first)
return {2, 0, 0}
