-- allow.lua: decide one request against one or more limits, all or
-- nothing: the request is admitted only if every limit admits it, and a
-- request some limit refuses consumes nothing from any of them.
--
-- KEYS     one key per limit
-- ARGV[1]  now in microseconds, or '' for Redis TIME (tests pin the clock)
-- ARGV[2]  '1' to consume when admitted, '0' to only look (peek)
-- ARGV[3]  a token unique to this call (names sliding-log entries)
-- then five per limit: algorithm (g gcra, f fixed window, l sliding log,
-- w sliding window), rate, period in microseconds, burst, cost
--
-- Reply: four integers per limit: admitted by this limit (1/0), remaining,
-- retry after (microseconds until a request of this cost would be
-- admitted; 0 if it is now), reset after (microseconds until the limit is
-- back to full). Remaining and reset describe the state after the call:
-- with the cost taken if the request was admitted and consumed, as before
-- otherwise.
--
-- All arithmetic is on integers below 2^52 (the Go side checks the rates),
-- which Lua's doubles hold exactly: GCRA measures time in 1/rate
-- microseconds so that a period need not divide evenly by the rate.
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local consume = ARGV[2] == '1'
local token = ARGV[3]

-- idiv is floor(a / b) for integers a >= 0, b > 0, corrected for the
-- rounding of the float division.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end
local function ceil_div(a, b)
  return idiv(a + b - 1, b)
end

-- Each algorithm returns: admitted, remaining and reset before and after
-- taking the cost, retry after, and a function that takes the cost.

-- GCRA keeps the theoretical arrival time (TAT) as "us:frac", meaning us +
-- frac/rate microseconds. A request of cost n moves it n periods/rate
-- later; it is admitted if the TAT stays within burst periods/rate of now.
-- In units of 1/rate microseconds: one request is worth period, the
-- allowance is burst * period.
local function gcra(key, rate, period, burst, cost)
  local ahead = 0
  local v = redis.call('GET', key)
  if v then
    local us, frac = string.match(v, '^(%d+):(%d+)$')
    us, frac = tonumber(us), tonumber(frac)
    if us and us >= now then
      ahead = (us - now) * rate + frac
    end
  end
  local cap = burst * period
  local after = ahead + cost * period
  local ok = after <= cap
  local retry = 0
  if not ok then
    retry = ceil_div(after - cap, rate)
  end
  local function remaining(a)
    return math.max(0, idiv(cap - math.min(a, cap), period))
  end
  return ok, remaining(ahead), remaining(after), ceil_div(ahead, rate), ceil_div(after, rate), retry,
    function()
      local us = idiv(after, rate)
      redis.call('SET', key, string.format('%d:%d', now + us, after - us * rate),
        'PX', ceil_div(ceil_div(after, rate), 1000) + 1)
    end
end

-- The fixed window is a counter whose TTL is the window: created with its
-- TTL in one command, and given one again if it ever lost it (an INCR
-- elsewhere that re-created it), so that no key can block forever.
local function fixed(key, rate, period, cost)
  local count = tonumber(redis.call('GET', key) or '0')
  local pttl = redis.call('PTTL', key)
  local window = ceil_div(period, 1000)
  if pttl == -1 then
    redis.call('PEXPIRE', key, window)
  end
  local exists = pttl ~= -2
  if pttl < 0 then
    pttl = window
  end
  local after = count + cost
  local ok = after <= rate
  local function reset(c)
    if c > 0 then return pttl * 1000 end
    return 0
  end
  local retry = 0
  if not ok then
    retry = pttl * 1000
  end
  return ok, math.max(0, rate - count), math.max(0, rate - after), reset(count), reset(after), retry,
    function()
      if exists then
        redis.call('INCRBY', key, cost)
      else
        redis.call('SET', key, cost, 'PX', window)
      end
    end
end

-- The sliding log is a sorted set of request times; entries older than a
-- period are dropped first (that is not consumption).
local function sliding_log(key, rate, period, cost)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - period)
  local count = redis.call('ZCARD', key)
  local after = count + cost
  local ok = after <= rate
  local retry = 0
  if not ok then
    -- The (after - rate)-th oldest entry must leave first.
    local e = redis.call('ZRANGE', key, after - rate - 1, after - rate - 1, 'WITHSCORES')
    retry = tonumber(e[2]) + period - now
  end
  local before_reset = 0
  if count > 0 then
    local e = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    before_reset = tonumber(e[2]) + period - now
  end
  return ok, rate - count, rate - after, before_reset, period, retry,
    function()
      local args = {}
      for j = 1, cost do
        args[#args + 1] = now
        args[#args + 1] = token .. ':' .. j
        if #args >= 2000 or j == cost then
          redis.call('ZADD', key, unpack(args))
          args = {}
        end
      end
      redis.call('PEXPIRE', key, ceil_div(period, 1000))
    end
end

-- The sliding window keeps the counts of the current and the previous
-- fixed window (aligned to the clock) and admits while
-- previous * (part of it still within the last period) + current <= rate,
-- multiplied through by period to stay in integers.
local function sliding_window(key, rate, period, cost)
  local cur = idiv(now, period)
  local s = redis.call('HMGET', key, 'w', 'c', 'p')
  local w, c, p = tonumber(s[1]), tonumber(s[2]) or 0, tonumber(s[3]) or 0
  if w == cur - 1 then
    p, c = c, 0
  elseif w ~= cur then
    p, c = 0, 0
  end
  local start = cur * period
  local overlap = period - (now - start)
  local cap = rate * period
  local function load(n)
    return p * overlap + n * period
  end
  local after = c + cost
  local ok = load(after) <= cap
  local retry = 0
  if not ok then
    local room = rate - after
    if room >= 0 then
      -- Later in this window, once the previous window's share is small
      -- enough: p * (period - e) <= room * period.
      retry = start + period - idiv(room * period, p) - now
    else
      -- In the next window, where this one is the previous:
      -- c * (period - e) <= (rate - cost) * period.
      retry = start + period + period - idiv((rate - cost) * period, c) - now
    end
  end
  local function remaining(n)
    return math.max(0, idiv(math.max(0, cap - load(n)), period))
  end
  local function reset(n)
    if n > 0 then return start + 2 * period - now end
    if p > 0 then return start + period - now end
    return 0
  end
  return ok, remaining(c), remaining(after), reset(c), reset(after), retry,
    function()
      redis.call('HSET', key, 'w', cur, 'c', after, 'p', p)
      redis.call('PEXPIRE', key, ceil_div(2 * period, 1000))
    end
end

local n = #KEYS
local decided, commits = {}, {}
local all = true
for i = 1, n do
  local a = 3 + (i - 1) * 5
  local alg = ARGV[a + 1]
  local rate, period, burst, cost = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local ok, rem0, rem1, reset0, reset1, retry, commit
  if alg == 'g' then
    ok, rem0, rem1, reset0, reset1, retry, commit = gcra(KEYS[i], rate, period, burst, cost)
  elseif alg == 'f' then
    ok, rem0, rem1, reset0, reset1, retry, commit = fixed(KEYS[i], rate, period, cost)
  elseif alg == 'l' then
    ok, rem0, rem1, reset0, reset1, retry, commit = sliding_log(KEYS[i], rate, period, cost)
  else
    ok, rem0, rem1, reset0, reset1, retry, commit = sliding_window(KEYS[i], rate, period, cost)
  end
  all = all and ok
  decided[i] = {ok, rem0, rem1, reset0, reset1, retry}
  commits[i] = commit
end

local take = consume and all
local reply = {}
for i = 1, n do
  local d = decided[i]
  if take then
    commits[i]()
  end
  local rem, reset = d[2], d[4]
  if take then
    rem, reset = d[3], d[5]
  end
  reply[#reply + 1] = d[1] and 1 or 0
  reply[#reply + 1] = rem
  reply[#reply + 1] = d[6]
  reply[#reply + 1] = reset
end
return reply
