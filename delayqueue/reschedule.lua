-- reschedule.lua: move a waiting job's due time.
--
-- KEYS     the queue's keys (common.lua)
-- ARGV[1]  job id
-- ARGV[2]  "d": ARGV[3] is a delay in ms from now; "a": a due time in ms
-- ARGV[4]  the queue's wake-up channel
--
-- Reply: {1, due} moved; {-1} the job is in flight; {0} no such job.
local id = ARGV[1]
if not redis.call('ZSCORE', KEYS[1], id) then
  if redis.call('HEXISTS', KEYS[3], 'p:' .. id) == 1 then
    return {-1}
  end
  return {0}
end
local due = tonumber(ARGV[3])
if ARGV[2] == 'd' then
  due = due > 0 and now_ceil() + due or now_ms()
end
redis.call('ZADD', KEYS[1], 'XX', due, id)
wake(ARGV[4], id, due)
return {1, due}
