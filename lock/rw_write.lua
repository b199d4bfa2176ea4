-- rw_write.lua: take the write side of a read-write lock: no writer and
-- no live reader.
--
-- KEYS and ARGV[1..3] as in rw_read.lua.
-- ARGV[4]  "1" if the caller will wait (Lock), "0" for a single attempt
--
-- Reply: a new fence when the lock is taken; r <= -1 otherwise, -r-2
-- being the milliseconds worth waiting (the writer's lease, or the
-- earliest reader's). A writer that has to wait marks KEYS[4], which keeps
-- new readers out until it has had its turn (or stopped coming back).

local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)

local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] or holder == ARGV[1] .. '+' then
  return current_fence(KEYS[2]) -- a retry of an attempt whose reply was lost
end
local wait
if holder then
  wait = busy(KEYS[1], holder, ARGV[3])
else
  local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if first[2] then
    wait = -math.max(tonumber(first[2]) - now, 0) - 2
  end
end
if wait then
  if ARGV[4] == '1' then
    -- Long enough to cover the wait and its jitter (maxJitter, wait.go);
    -- each attempt renews it.
    redis.call('SET', KEYS[4], '1', 'PX', math.max(-wait - 2, 0) + 1000)
  end
  return wait
end

-- Flag at once if readers wait: the release must wake them.
local value = ARGV[1]
if redis.call('EXISTS', KEYS[5]) == 1 then
  value = value .. '+'
end
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
redis.call('DEL', KEYS[4], KEYS[5])
return new_fence(KEYS[2])
