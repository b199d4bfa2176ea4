-- common.lua: prepended to every delayqueue script (scripts.go).
--
-- A queue's keys, all under the queue's hash tag, in this order:
--   KEYS[1] due    zset: waiting job id -> due time (ms, Redis clock)
--   KEYS[2] run    zset: in-flight job id -> lease deadline (ms)
--   KEYS[3] jobs   hash: "p:<id>" payload, "a:<id>" attempts so far,
--                  "t:<id>" the lease token of the current delivery, or,
--                  while a retried or released job waits, "~" and the
--                  token of the delivery that gave it back (nack.lua);
--                  "c:<claim>" the record of a claim whose jobs are all
--                  still in flight (claim.lua)
--   KEYS[4] dead   zset: dead job id -> when it died (ms)
--   KEYS[5] morgue hash: a dead job's "p:<id>" payload, "a:<id>" attempts,
--                  "e:<id>" last error and, if a delivery buried it,
--                  "k:<id>" that delivery's lease token
-- A job is waiting (in due), in flight (in run) or dead (in dead), never
-- two at once; its payload moves with it.
--
-- The tokens and records let a script that go-redis sends again after
-- losing its reply (same KEYS and ARGV, the first run's effects in
-- place) recognise its own first run and answer as it did.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- now_ceil is the current time rounded up to the millisecond: a due time
-- computed from it is never early.
local function now_ceil()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
end

-- wake tells waiting consumers when a job became the queue's head, so
-- that they move their timers forward.
local function wake(channel, id, due)
  local head = redis.call('ZRANGE', KEYS[1], 0, 0)
  if head[1] == id then
    redis.call('PUBLISH', channel, string.format('%d', due))
  end
end

-- claim_field returns the jobs hash field of the record of the claim
-- that handed out lease token tok ("<claim>:<i>"), or nil. A claim's
-- record is needed only until the claim's reply arrives, and no job
-- leaves the in-flight set before that unless its lease ran out, so
-- every script that takes a job out of it deletes the record in a
-- command it runs anyway (HDEL): records live no longer than their jobs.
local function claim_field(tok)
  local c = type(tok) == 'string' and string.match(tok, '^(.+):%d+$')
  if c then
    return 'c:' .. c
  end
  return nil
end

-- bury moves job id (waiting or in flight) to the dead letters, with its
-- payload, and drops the oldest dead letters beyond cap, never id itself:
-- letters buried in one millisecond tie, and a sorted set orders ties by
-- member, so id could rank as the oldest. token, if given, is the lease
-- token of the delivery that buries it, kept so that the delivery's
-- resent call finds its burial (nack.lua).
local function bury(id, reason, now, cap, token)
  local f = redis.call('HMGET', KEYS[3], 'p:' .. id, 'a:' .. id, 't:' .. id)
  local fields = {'p:' .. id, 'a:' .. id, 't:' .. id}
  fields[4] = claim_field(f[3])
  redis.call('HDEL', KEYS[3], unpack(fields))
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  local letter = {'p:' .. id, f[1] or '', 'a:' .. id, f[2] or '0', 'e:' .. id, reason}
  if token then
    letter[7], letter[8] = 'k:' .. id, token
  end
  redis.call('HSET', KEYS[5], unpack(letter))
  redis.call('ZADD', KEYS[4], now, id)
  local over = redis.call('ZCARD', KEYS[4]) - cap
  if over > 0 then
    for _, o in ipairs(redis.call('ZRANGE', KEYS[4], 0, over)) do
      if over > 0 and o ~= id then
        redis.call('ZREM', KEYS[4], o)
        redis.call('HDEL', KEYS[5], 'p:' .. o, 'a:' .. o, 'e:' .. o, 'k:' .. o)
        over = over - 1
      end
    end
  end
end
