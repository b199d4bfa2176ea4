-- fixed_one.lua: decide one request against one fixed-window limit. It
-- takes the arguments and gives the reply that common.lua describes, but
-- runs alone, without common.lua and fixed.lua: this is the hot path of
-- the most used limit, and their shared helpers (closures created on
-- every call, the seven-value tuple) cost about a tenth of its server
-- time. The algorithm is fixed.lua's; keep the two in step.
--
-- Consuming takes two commands for an admitted request: INCRBY counts it
-- first (sparing a read), PTTL reads the window's end, and a key without a
-- TTL (new, or one that lost it) gets the whole window, so no key can
-- block forever. A refused request is taken back at once. Times are
-- PTTL + 1 ms, as fixed.lua explains.
local key = KEYS[1]
local rate, cost = tonumber(ARGV[5]), tonumber(ARGV[8])
-- The window in milliseconds, rounded up; exact for periods below 2^52 µs.
local window = math.floor((tonumber(ARGV[6]) + 999) / 1000)

if ARGV[2] == '1' then
  local count = redis.call('INCRBY', key, cost)
  local pttl = redis.call('PTTL', key)
  if pttl < 0 then
    redis.call('PEXPIRE', key, window)
    pttl = window
  end
  if count <= rate then
    return {1, rate - count, 0, (pttl + 1) * 1000}
  end
  local before = count - cost
  if before == 0 then
    redis.call('DEL', key)
  else
    redis.call('DECRBY', key, cost)
  end
  return {0, math.max(0, rate - before), (pttl + 1) * 1000, before > 0 and (pttl + 1) * 1000 or 0}
end

-- A peek: what consuming would answer, changing nothing but a lost TTL.
local count = tonumber(redis.call('GET', key) or '0')
local pttl = redis.call('PTTL', key)
if pttl == -1 then
  redis.call('PEXPIRE', key, window)
end
if pttl < 0 then
  pttl = window
end
local retry = 0
if count + cost > rate then
  retry = (pttl + 1) * 1000
end
return {count + cost <= rate and 1 or 0, math.max(0, rate - count), retry, count > 0 and (pttl + 1) * 1000 or 0}
