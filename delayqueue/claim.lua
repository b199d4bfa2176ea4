-- claim.lua: hand out due jobs, each with a lease. Requeues first the jobs
-- whose lease ran out (their consumer died or stalled), so no reaper or
-- leader is needed: every consumer's claim does that work, a bounded
-- batch at a time.
--
-- KEYS     the queue's keys (common.lua)
-- ARGV[1]  how many jobs to claim at most (> 0)
-- ARGV[2]  the lease, in ms
-- ARGV[3]  a random string, new for each claim: this claim's lease tokens
--          are ARGV[3]..":"..i, and its record is the jobs hash field
--          "c:"..ARGV[3]
-- ARGV[4]  the most attempts a job gets: a job whose lease ran out on its
--          last attempt is buried, not requeued
-- ARGV[5]  the most expired leases to requeue in this call
-- ARGV[6]  the dead-letter cap
--
-- Reply: {n, now, next, then five per job: id, payload, attempt, token,
-- due}. next is when a claim may next find work: the earlier of the due
-- time of the first job still waiting and the first lease deadline (a
-- consumer may die); -1 when there is neither.
--
-- A claim that hands out jobs records them: "<now>", then " <due> <length>
-- <id>" per job (the score as Redis gave it, and the id length-prefixed,
-- as it may hold any byte). Run again with the same ARGV (go-redis resends
-- a call whose reply it lost), the claim finds its record and hands out
-- the same deliveries again, with the same now: otherwise it would hand
-- out other jobs, and the first run's would sit leased to tokens nobody
-- holds until their leases ran out, an attempt lost (or, on a last
-- attempt, buried without having run).
local now = now_ms()
local lease, max = tonumber(ARGV[2]), tonumber(ARGV[4])
local record = 'c:' .. ARGV[3]

local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[5]))
for _, id in ipairs(expired) do
  local f = redis.call('HMGET', KEYS[3], 'a:' .. id, 't:' .. id)
  if tonumber(f[1] or '0') >= max then
    bury(id, 'lease expired on the last attempt', now, tonumber(ARGV[6]))
  else
    redis.call('ZREM', KEYS[2], id)
    -- (A field named twice is deleted once.)
    redis.call('HDEL', KEYS[3], 't:' .. id, claim_field(f[2]) or 't:' .. id)
    redis.call('ZADD', KEYS[1], now, id)
  end
end

-- replay rebuilds the reply of the first run from its record, with the
-- jobs that still hold their tokens (all of them: a job that left the
-- in-flight set took the record with it).
local function replay(rec)
  local at = string.find(rec, ' ', 1, true)
  local ids, dues = {}, {}
  local reply = {0, tonumber(string.sub(rec, 1, (at or 0) - 1)), -1}
  while at do
    local b = string.find(rec, ' ', at + 1, true)
    local c = string.find(rec, ' ', b + 1, true)
    local id = string.sub(rec, c + 1, c + tonumber(string.sub(rec, b + 1, c - 1)))
    ids[#ids + 1], dues[#dues + 1] = id, tonumber(string.sub(rec, at + 1, b - 1))
    at = c + #id + 1
    if at > #rec then
      at = nil
    end
  end
  if #ids == 0 then
    return reply
  end
  local fields = {}
  for i, id in ipairs(ids) do
    fields[3 * i - 2], fields[3 * i - 1], fields[3 * i] = 'p:' .. id, 'a:' .. id, 't:' .. id
  end
  local got = redis.call('HMGET', KEYS[3], unpack(fields))
  for i, id in ipairs(ids) do
    local token = ARGV[3] .. ':' .. i
    if got[3 * i] == token then
      local r = #reply
      reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5] =
        id, got[3 * i - 2] or '', tonumber(got[3 * i - 1] or '0'), token, dues[i]
      reply[1] = reply[1] + 1
    end
  end
  return reply
end

local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local n = #due / 2
local reply = {n, now, -1}
local lease_end
if n > 0 then
  -- One HMGET reads every job's payload and attempts, and this claim's
  -- record should it be a rerun; one HSET writes the attempts, lease
  -- tokens and record: the commands of a claim do not grow with the jobs
  -- it hands out.
  local ids, fields = {}, {record}
  for i = 1, n do
    local id = due[2 * i - 1]
    ids[i] = id
    fields[2 * i], fields[2 * i + 1] = 'p:' .. id, 'a:' .. id
  end
  local got = redis.call('HMGET', KEYS[3], unpack(fields))
  if got[1] then
    reply = replay(got[1])
  else
    local run, writes, rec = {}, {}, {string.format('%d', now)}
    for i = 1, n do
      local id, at = ids[i], tonumber(due[2 * i])
      run[2 * i - 1], run[2 * i] = now + lease, id
      local attempt = tonumber(got[2 * i + 1] or '0') + 1
      local token = ARGV[3] .. ':' .. i
      local w = #writes
      writes[w + 1], writes[w + 2], writes[w + 3], writes[w + 4] = 'a:' .. id, attempt, 't:' .. id, token
      rec[i + 1] = ' ' .. due[2 * i] .. ' ' .. #id .. ' ' .. id
      local r = #reply
      reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5] =
        id, got[2 * i] or '', attempt, token, at
    end
    writes[#writes + 1], writes[#writes + 2] = record, table.concat(rec)
    redis.call('ZREM', KEYS[1], unpack(ids))
    redis.call('ZADD', KEYS[2], unpack(run))
    redis.call('HSET', KEYS[3], unpack(writes))
  end
else
  -- Nothing due. A rerun's first run may have taken the last due jobs;
  -- they are in flight then, so only a queue with jobs in flight needs
  -- to look for the record.
  lease_end = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if lease_end[1] then
    local rec = redis.call('HGET', KEYS[3], record)
    if rec then
      reply = replay(rec)
    end
  end
end

local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
lease_end = lease_end or redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local next = tonumber(head[2] or '-1')
if lease_end[2] and (next < 0 or tonumber(lease_end[2]) < next) then
  next = tonumber(lease_end[2])
end
reply[3] = next
return reply
