-- sem_extend.lua: reset a permit's lease, if the caller still holds it.
--
-- KEYS[1]  permits (see sem_acquire.lua)
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
--
-- Reply: 1 extended; 0 not held (an expired permit is dropped: it was
-- already free for others to take).

local t = now_ms()
local expiry = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if not expiry then
  return 0
end
if expiry <= t then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', t + tonumber(ARGV[2]), ARGV[1])
expire_at_last(KEYS[1])
return 1
