-- extend.lua: renew a delivery's lease, if it still holds its job.
--
-- KEYS     the queue's keys (common.lua)
-- ARGV[1]  job id
-- ARGV[2]  the delivery's lease token
-- ARGV[3]  the new lease, in ms from now
--
-- Reply: the new lease deadline in ms; 0 if the delivery no longer holds
-- the job.
local id = ARGV[1]
if redis.call('HGET', KEYS[3], 't:' .. id) ~= ARGV[2] then
  return 0
end
local deadline = now_ms() + tonumber(ARGV[3])
redis.call('ZADD', KEYS[2], 'XX', deadline, id)
return deadline
