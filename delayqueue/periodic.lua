-- periodic.lua: enqueue one firing of a periodic job, exactly once. The
-- firing is enqueued only if it is later than the latest firing the
-- schedule has enqueued, which this call then records: so a firing that
-- ran and was acked long ago is never enqueued again, whoever offers it.
--
-- KEYS[1..5] the queue's keys (common.lua)
-- KEYS[6]    the queue's periodic record, a hash: schedule name ->
--            "<latest firing enqueued>:<kept until>" (ms since the epoch)
-- ARGV[1]  schedule name
-- ARGV[2]  the firing to enqueue (ms), or -1 to only read the record
-- ARGV[3]  the firing after it (ms), or -1 if there is none: once that one
--          is due by the Redis clock, this one is stale and not enqueued
--          (the runner then offers the latest firing due instead)
-- ARGV[4]  the job's id
-- ARGV[5]  the job's payload
-- ARGV[6]  keep the record at least until then (ms since the epoch)
-- ARGV[7]  the queue's wake-up channel
--
-- Reply: {status, latest, now}. status 1: the firing was enqueued as a
-- job due at it; 2: it was recorded, but a job with its id was already
-- waiting or in flight; 0: nothing changed (no firing offered, or not
-- later than the latest, or stale). latest: the latest firing recorded
-- now, -1 if none. now: the Redis clock (ms).
local now = now_ms()
local name = ARGV[1]
-- Each schedule's record is kept until its own time: the hash's expiry,
-- pushed on by every schedule of the queue, would keep a record nobody
-- renews for as long as another schedule runs. A record past its time
-- counts as none, so the schedule starts afresh. (A record without a time,
-- from an earlier version, lives as long as the hash.)
local latest = -1
local rec = redis.call('HGET', KEYS[6], name)
if rec then
  local at, keep = string.match(rec, '^(%d+):(%d+)$')
  if not at then
    latest = tonumber(rec) or -1
  elseif tonumber(keep) > now then
    latest = tonumber(at)
  else
    redis.call('HDEL', KEYS[6], name)
  end
end
local f, after = tonumber(ARGV[2]), tonumber(ARGV[3])
if f < 0 or f <= latest or (after >= 0 and after <= now) then
  return {0, latest, now}
end

local record = ARGV[2] .. ':' .. ARGV[6]
redis.call('HSET', KEYS[6], name, record)
-- The hash's expiry only ever moves later, so it covers every schedule's
-- need, and takes the record away once every schedule stopped. On a server
-- whose clock moves while a script runs (miniredis; a real Redis holds it
-- still), a hash at the end of its time can expire between these calls,
-- taking the record just written: it is then written again, with the
-- expiry. (Every other record in it was past its time.)
local ttl = math.max(tonumber(ARGV[6]) - now, 1)
if redis.call('PTTL', KEYS[6]) < ttl and redis.call('PEXPIRE', KEYS[6], ttl) == 0 then
  redis.call('HSET', KEYS[6], name, record)
  redis.call('PEXPIRE', KEYS[6], ttl)
end

local id = ARGV[4]
if redis.call('HEXISTS', KEYS[3], 'p:' .. id) == 1 then
  return {2, f, now}
end
redis.call('ZADD', KEYS[1], f, id)
redis.call('HSET', KEYS[3], 'p:' .. id, ARGV[5], 'a:' .. id, 0)
wake(ARGV[7], id, f)
return {1, f, now}
