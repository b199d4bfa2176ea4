-- cancel.lua: remove a waiting job.
--
-- KEYS     the queue's keys (common.lua)
-- ARGV[1]  job id
--
-- Reply: 1 removed; -1 the job is in flight (a consumer has it: it cannot
-- be taken back); 0 no such job.
local id = ARGV[1]
if redis.call('ZREM', KEYS[1], id) == 1 then
  redis.call('HDEL', KEYS[3], 'p:' .. id, 'a:' .. id, 't:' .. id)
  return 1
end
if redis.call('HEXISTS', KEYS[3], 'p:' .. id) == 1 then
  return -1
end
return 0
