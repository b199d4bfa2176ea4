-- claim.lua: hand out due jobs, each with a lease. Requeues first the jobs
-- whose lease ran out (their consumer died or stalled), so no reaper or
-- leader is needed: every consumer's claim does that work, a bounded
-- batch at a time.
--
-- KEYS     the queue's keys (common.lua)
-- ARGV[1]  how many jobs to claim at most (> 0)
-- ARGV[2]  the lease, in ms
-- ARGV[3]  a random string: this claim's lease tokens are ARGV[3]..":"..i
-- ARGV[4]  the most attempts a job gets: a job whose lease ran out on its
--          last attempt is buried, not requeued
-- ARGV[5]  the most expired leases to requeue in this call
-- ARGV[6]  the dead-letter cap
--
-- Reply: {n, now, next, then five per job: id, payload, attempt, token,
-- due}. next is when a claim may next find work: the earlier of the due
-- time of the first job still waiting and the first lease deadline (a
-- consumer may die); -1 when there is neither.
local now = now_ms()
local lease, max = tonumber(ARGV[2]), tonumber(ARGV[4])

local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[5]))
for _, id in ipairs(expired) do
  if tonumber(redis.call('HGET', KEYS[3], 'a:' .. id) or '0') >= max then
    bury(id, 'lease expired on the last attempt', now, tonumber(ARGV[6]))
  else
    redis.call('ZREM', KEYS[2], id)
    redis.call('HDEL', KEYS[3], 't:' .. id)
    redis.call('ZADD', KEYS[1], now, id)
  end
end

local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local n = #due / 2
local reply = {n, now, -1}
if n > 0 then
  -- One HMGET reads every job's payload and attempts, one HSET writes
  -- the attempts and lease tokens back: the commands of a claim do not
  -- grow with the jobs it hands out.
  local ids, run, fields = {}, {}, {}
  for i = 1, n do
    local id = due[2 * i - 1]
    ids[i] = id
    run[2 * i - 1], run[2 * i] = now + lease, id
    fields[2 * i - 1], fields[2 * i] = 'p:' .. id, 'a:' .. id
  end
  redis.call('ZREM', KEYS[1], unpack(ids))
  redis.call('ZADD', KEYS[2], unpack(run))
  local got = redis.call('HMGET', KEYS[3], unpack(fields))
  local writes = {}
  for i = 1, n do
    local id = ids[i]
    local attempt = tonumber(got[2 * i] or '0') + 1
    local token = ARGV[3] .. ':' .. i
    local w = #writes
    writes[w + 1], writes[w + 2], writes[w + 3], writes[w + 4] = 'a:' .. id, attempt, 't:' .. id, token
    local at = #reply
    reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4], reply[at + 5] =
      id, got[2 * i - 1] or '', attempt, token, tonumber(due[2 * i])
  end
  redis.call('HSET', KEYS[3], unpack(writes))
end

local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local lease_end = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local next = tonumber(head[2] or '-1')
if lease_end[2] and (next < 0 or tonumber(lease_end[2]) < next) then
  next = tonumber(lease_end[2])
end
reply[3] = next
return reply
