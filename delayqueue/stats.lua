-- stats.lua: the queue's counts and its oldest due time.
--
-- KEYS     the queue's keys (common.lua)
--
-- Reply: {waiting, in flight, dead, head due (ms, -1 if none waits), now}.
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[4]),
  tonumber(head[2] or '-1'), now_ms()}
