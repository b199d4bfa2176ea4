-- ack.lua: a delivery's job is done: forget it, if the delivery still
-- holds the job (its token is the job's current one).
--
-- KEYS     the queue's keys (common.lua)
-- ARGV[1]  job id
-- ARGV[2]  the delivery's lease token
--
-- Reply: 1 done; 0 the delivery no longer holds the job (its lease ran
-- out and the job was requeued, claimed again or buried).
local id = ARGV[1]
if redis.call('HGET', KEYS[3], 't:' .. id) ~= ARGV[2] then
  return 0
end
redis.call('ZREM', KEYS[2], id)
redis.call('HDEL', KEYS[3], 'p:' .. id, 'a:' .. id, 't:' .. id)
return 1
