-- nack.lua: a delivery failed: retry its job after a backoff, or bury it
-- when it has had its attempts (or the caller gives up on it). Or the
-- delivery is released: its job goes back, due now, and the attempt does
-- not count (a worker shutting down).
--
-- KEYS     the queue's keys (common.lua)
-- ARGV[1]  job id
-- ARGV[2]  the delivery's lease token
-- ARGV[3]  the backoff before the retry, in ms
-- ARGV[4]  the most attempts a job gets
-- ARGV[5]  "1": bury the job now, whatever its attempts; "r": release it
-- ARGV[6]  the error, kept with a buried job
-- ARGV[7]  the dead-letter cap
-- ARGV[8]  the queue's wake-up channel
--
-- Reply: {1, due} retried at due; {2, now} buried; {0} the delivery no
-- longer holds the job.
local id = ARGV[1]
if redis.call('HGET', KEYS[3], 't:' .. id) ~= ARGV[2] then
  return {0}
end
-- The job leaves the in-flight set: the record of its claim goes too (a
-- field named twice is deleted once).
local record = claim_field(ARGV[2]) or 't:' .. id
if ARGV[5] == 'r' then
  local now = now_ms()
  redis.call('ZREM', KEYS[2], id)
  redis.call('HDEL', KEYS[3], 't:' .. id, record)
  redis.call('HINCRBY', KEYS[3], 'a:' .. id, -1)
  redis.call('ZADD', KEYS[1], now, id)
  wake(ARGV[8], id, now)
  return {1, now}
end
local now = now_ceil()
if ARGV[5] == '1' or tonumber(redis.call('HGET', KEYS[3], 'a:' .. id) or '0') >= tonumber(ARGV[4]) then
  bury(id, ARGV[6], now, tonumber(ARGV[7]))
  return {2, now}
end
local due = now + tonumber(ARGV[3])
redis.call('ZREM', KEYS[2], id)
redis.call('HDEL', KEYS[3], 't:' .. id, record)
redis.call('ZADD', KEYS[1], due, id)
wake(ARGV[8], id, due)
return {1, due}
