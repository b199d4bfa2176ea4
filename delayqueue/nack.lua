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
-- Reply: {1, due} retried (or released) at due; {2, when} buried then;
-- {0} the delivery no longer holds the job.
--
-- A job given back waits with "~" and the delivery's token as its token,
-- and a buried one keeps the token in the dead letters ("k:"), so that
-- the same call run again (go-redis resends a call whose reply it lost)
-- answers as its first run did: {1, due} while the job still waits,
-- {2, when} while it is still dead. Once another claim took the job, or
-- it left the dead letters, the answer is {0}. A retry or a release
-- (ARGV[5] "0" or "r") only recognises a job given back; a burial ("0" or
-- "1") only a buried one.
local id, tok, mode = ARGV[1], ARGV[2], ARGV[5]
-- The attempts ride along in the HMGET of the token: a retry needs them.
local f = redis.call('HMGET', KEYS[3], 't:' .. id, 'a:' .. id)
if f[1] ~= tok then
  if f[1] == '~' .. tok and mode ~= '1' then
    local due = redis.call('ZSCORE', KEYS[1], id)
    if due then
      return {1, tonumber(due)}
    end
  elseif not f[1] and mode ~= 'r' and redis.call('HGET', KEYS[5], 'k:' .. id) == tok then
    return {2, tonumber(redis.call('ZSCORE', KEYS[4], id) or '0')}
  end
  return {0}
end
-- The job leaves the in-flight set: the record of its claim goes too.
local record = claim_field(tok)
if mode == 'r' then
  local now = now_ms()
  redis.call('ZREM', KEYS[2], id)
  redis.call('HSET', KEYS[3], 't:' .. id, '~' .. tok, 'a:' .. id, tonumber(f[2] or '1') - 1)
  if record then
    redis.call('HDEL', KEYS[3], record)
  end
  redis.call('ZADD', KEYS[1], now, id)
  wake(ARGV[8], id, now)
  return {1, now}
end
local now = now_ceil()
if mode == '1' or tonumber(f[2] or '0') >= tonumber(ARGV[4]) then
  bury(id, ARGV[6], now, tonumber(ARGV[7]), tok)
  return {2, now}
end
local due = now + tonumber(ARGV[3])
redis.call('ZREM', KEYS[2], id)
redis.call('HSET', KEYS[3], 't:' .. id, '~' .. tok)
if record then
  redis.call('HDEL', KEYS[3], record)
end
redis.call('ZADD', KEYS[1], due, id)
wake(ARGV[8], id, due)
return {1, due}
