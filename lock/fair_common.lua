-- fair_common.lua is prepended (after fence.lua and sem_common.lua) to the
-- fair lock's scripts that hand the lock out: fair_acquire.lua, and
-- fair_release.lua when it hands the lock over.

-- drop_gone removes the waiters that stopped coming back (their places
-- expired by Redis ms now) from the queue.
local function drop_gone(queue, places, now)
  local gone = redis.call('ZRANGEBYSCORE', places, '-inf', now)
  if #gone > 0 then
    redis.call('ZREM', queue, unpack(gone))
    redis.call('ZREM', places, unpack(gone))
  end
end

-- take gives the lock (key lock, fence key fence) to token, which is first
-- in the queue or alone, for ttl ms, and returns its fence. Its place
-- goes; with others still queued, the lock is flagged at once: its release
-- must wake them, and they may not try again before it.
local function take(lock, fence, queue, places, token, ttl)
  redis.call('ZREM', queue, token)
  redis.call('ZREM', places, token)
  local value = token
  if redis.call('ZCARD', queue) > 0 then
    value = value .. '+'
  end
  redis.call('SET', lock, value, 'PX', ttl)
  return new_fence(fence)
end
