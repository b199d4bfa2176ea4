-- enqueue.lua: add a job, unless one with its id is waiting or in flight.
--
-- KEYS     the queue's keys (common.lua)
-- ARGV[1]  job id
-- ARGV[2]  payload
-- ARGV[3]  "d": ARGV[4] is a delay in ms from now (Redis clock);
--          "a": ARGV[4] is the due time in ms since the epoch
-- ARGV[5]  the queue's wake-up channel
--
-- Reply: {1, due} added; {0, due} a job with this id is waiting, due then;
-- {0, -1} a job with this id is in flight. Nothing changes for a
-- duplicate. Run again with the same ARGV (go-redis resends a call whose
-- reply it lost), the call finds its own job: {0, due}, or {0, -1} if it
-- was claimed meanwhile. Enqueue knows it for its own when it drew the id.
local id = ARGV[1]
-- HSETNX is the duplicate check and the write at once: one command fewer
-- per job than HEXISTS then HSET. The attempts field is born at the first
-- claim.
if redis.call('HSETNX', KEYS[3], 'p:' .. id, ARGV[2]) == 0 then
  local due = redis.call('ZSCORE', KEYS[1], id)
  return {0, due and tonumber(due) or -1}
end
local due = tonumber(ARGV[4])
if ARGV[3] == 'd' then
  -- A delay counts from the next whole millisecond, so the job is never
  -- early; a job due at once is due now.
  due = due > 0 and now_ceil() + due or now_ms()
end
redis.call('ZADD', KEYS[1], due, id)
wake(ARGV[5], id, due)
return {1, due}
