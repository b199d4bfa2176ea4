-- fair_common.lua is prepended (after fence.lua and sem_common.lua) to the
-- fair lock's scripts that hand the lock out or give places in its queue:
-- fair_acquire.lua, and fair_release.lua when it hands the lock over.

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

-- hold_place gives token a place at the back of the queue, or keeps the
-- one it has, until Redis ms now + timeout: a waiter that does not come
-- back by then loses it.
local function hold_place(queue, places, token, now, timeout)
  if not redis.call('ZSCORE', queue, token) then
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')[2]
    redis.call('ZADD', queue, (tonumber(last) or 0) + 1, token)
  end
  redis.call('ZADD', places, now + timeout, token)
  -- The queue lives while anyone keeps a place in it: its expiry only
  -- moves later, or a waiter with a short place timeout would cut short
  -- the places of those with long ones. (A key without one, -1, or just
  -- created, gets one.)
  for _, k in ipairs({queue, places}) do
    if redis.call('PTTL', k) < 2 * timeout then
      redis.call('PEXPIRE', k, 2 * timeout)
    end
  end
end
