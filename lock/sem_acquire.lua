-- sem_acquire.lua: take a permit of a semaphore if fewer than its limit
-- are held.
--
-- KEYS[1]  permits: sorted set, owner token -> expiry (Redis ms)
-- KEYS[2]  limit: the number of permits, a string; set to ARGV[4] if absent
-- KEYS[3]  wanted: exists while a waiter asked to be told of a release
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  "1" if the caller will wait for a release message when no
--          permit is free (then wanted is set), else "0"
-- ARGV[4]  the limit to store if none is stored
--
-- Reply: 1 if the permit is held (also for a repeated call with the same
-- token: a resent command is harmless). r <= -1 if every permit is taken:
-- the earliest of them expires in -r-2 ms.
--
-- Expired permits (their holders crashed or stalled) are dropped first,
-- so they count for nothing and come back by themselves.

local t = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
local limit = tonumber(redis.call('GET', KEYS[2]))
if not limit then
  redis.call('SET', KEYS[2], ARGV[4])
  limit = tonumber(ARGV[4])
end
local held = redis.call('ZSCORE', KEYS[1], ARGV[1])
if held or redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], t + tonumber(ARGV[2]), ARGV[1])
  expire_at_last(KEYS[1])
  return 1
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local wait = 0
if first[2] then
  wait = math.max(tonumber(first[2]) - t, 0)
end
if ARGV[3] == '1' then
  -- Long enough to cover the wait and its jitter (maxJitter, wait.go);
  -- each failed attempt renews it.
  redis.call('SET', KEYS[3], '1', 'PX', wait + 1000)
end
return -wait - 2
