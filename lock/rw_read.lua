-- rw_read.lua: take a read share of a read-write lock.
--
-- KEYS[1]  lock key: the writer's, a string as in acquire.lua
-- KEYS[2]  fence key (see fence.lua)
-- KEYS[3]  readers: sorted set, owner token -> share expiry (Redis ms)
-- KEYS[4]  writer waiting: exists while a writer waits for the readers
-- KEYS[5]  readers waiting: exists while readers wait for a writer
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  "1" if the caller waits for a release message, else "0"
-- ARGV[4]  (unused here; rw_write.lua's "will wait")
--
-- Reply: the current fence (that of the last writer) when the share is
-- taken; r <= -1 otherwise, -r-2 being the milliseconds worth waiting.
-- A waiting writer keeps new readers out, so a stream of readers cannot
-- starve it; readers blocked by a writer mark KEYS[5] so that the
-- writer's release wakes them.

local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  return current_fence(KEYS[2]) -- a retry of an attempt whose reply was lost
end

local holder = redis.call('GET', KEYS[1])
local wait
if holder then
  wait = busy(KEYS[1], holder, ARGV[3])
else
  local writer = redis.call('PTTL', KEYS[4])
  if writer > 0 then
    wait = -writer - 2
  end
end
if wait then
  if ARGV[3] == '1' then
    -- Long enough to cover the wait and its jitter (maxJitter, wait.go).
    redis.call('SET', KEYS[5], '1', 'PX', math.max(-wait - 2, 0) + 1000)
  end
  return wait
end

redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), ARGV[1])
expire_at_last(KEYS[3])
return current_fence(KEYS[2])
