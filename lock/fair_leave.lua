-- fair_leave.lua: give up a place in a fair lock's queue.
--
-- KEYS[1]  lock key (its channel is KEYS[1] .. ':released')
-- KEYS[2]  queue (see fair_acquire.lua)
-- KEYS[3]  places
-- ARGV[1]  owner token
--
-- Reply: 1 if the caller had a place, 0 if not. When the first waiter
-- leaves while the lock is free, the new first is told, as on a release
-- (see fair_release.lua), so it does not wait out the leaver's place.

local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
local had = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if had == 1 and first == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 0 then
  local next = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if next then
    redis.call('PUBLISH', KEYS[1] .. ':released', next)
  end
end
return had
