-- cancel.lua: remove a waiting job.
--
-- KEYS     the queue's keys (common.lua)
-- ARGV[1]  job id
--
-- Reply: 1 removed; -1 the job is in flight (a consumer has it: it cannot
-- be taken back); 0 no such job. Run again with the same ARGV (go-redis
-- resends a call whose reply it lost), a removal answers 0: nothing here
-- tells this call's own first run from a job that ran and was acked, and
-- keeping a trace of each cancel would cost a command on every call.
local id = ARGV[1]
if redis.call('ZREM', KEYS[1], id) == 1 then
  redis.call('HDEL', KEYS[3], 'p:' .. id, 'a:' .. id, 't:' .. id)
  return 1
end
if redis.call('HEXISTS', KEYS[3], 'p:' .. id) == 1 then
  return -1
end
return 0
