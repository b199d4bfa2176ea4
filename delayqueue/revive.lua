-- revive.lua: requeue a dead job, due now, with its attempts reset.
--
-- KEYS     the queue's keys (common.lua)
-- ARGV[1]  job id
-- ARGV[2]  the queue's wake-up channel
--
-- Reply: 1 requeued; 0 no such dead job; -1 a live job has its id now.
-- Run again with the same ARGV (go-redis resends a call whose reply it
-- lost), a revival answers 0: the job is no longer dead, and nothing here
-- tells this call's first run from another revival.
local id = ARGV[1]
if not redis.call('ZSCORE', KEYS[4], id) then
  return 0
end
if redis.call('HEXISTS', KEYS[3], 'p:' .. id) == 1 then
  return -1
end
local p = redis.call('HGET', KEYS[5], 'p:' .. id) or ''
redis.call('ZREM', KEYS[4], id)
redis.call('HDEL', KEYS[5], 'p:' .. id, 'a:' .. id, 'e:' .. id, 'k:' .. id)
local now = now_ms()
redis.call('HSET', KEYS[3], 'p:' .. id, p, 'a:' .. id, 0)
redis.call('ZADD', KEYS[1], now, id)
wake(ARGV[2], id, now)
return 1
