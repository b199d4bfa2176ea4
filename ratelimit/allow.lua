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
local consume = ARGV[2] == '1'
local token = ARGV[3]

-- Redis TIME is read once, and only by the algorithms that need it.
local now = tonumber(ARGV[1])
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return now
end

-- idiv is floor(a / b) for integers a >= 0, b > 0, corrected for the
-- rounding of the float division.
local floor, min, max = math.floor, math.min, math.max
local function idiv(x, y)
  local q = floor(x / y)
  if q * y > x then
    q = q - 1
  elseif (q + 1) * y <= x then
    q = q + 1
  end
  return q
end

-- The loop decides each limit and leaves nine values per limit in d, from
-- d[b+1]: admitted; remaining and reset after, before taking the cost and
-- after; retry after; and what taking the cost needs (three values). The
-- code is flat, without closures or a table per value, because allocating
-- on every call costs microseconds on this hot path.
local n = #KEYS
local d = {}
local all = true
for i = 1, n do
  local a = 3 + (i - 1) * 5
  local alg, key, b = ARGV[a + 1], KEYS[i], (i - 1) * 9
  local rate, period, burst, cost = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  d[b + 6] = 0

  if alg == 'g' then
    -- GCRA keeps the theoretical arrival time (TAT) as "us:frac", meaning
    -- us + frac/rate microseconds. In units of 1/rate microseconds a
    -- request is worth period, the allowance is burst * period, and ahead
    -- is how far the TAT lies beyond now.
    local t = clock()
    local ahead = 0
    local v = redis.call('GET', key)
    if v then
      local us, frac = string.match(v, '^(%d+):(%d+)$')
      us = tonumber(us)
      if us and us >= t then
        ahead = (us - t) * rate + tonumber(frac)
      end
    end
    local cap = burst * period
    local after = ahead + cost * period
    d[b + 1] = after <= cap
    if not d[b + 1] then
      d[b + 6] = idiv(after - cap + rate - 1, rate)
    end
    d[b + 2] = idiv(cap - min(ahead, cap), period)
    d[b + 3] = idiv(cap - min(after, cap), period)
    d[b + 4] = idiv(ahead + rate - 1, rate)
    d[b + 5] = idiv(after + rate - 1, rate)
    local us = idiv(after, rate)
    d[b + 7] = string.format('%d:%d', t + us, after - us * rate)
    d[b + 8] = idiv(d[b + 5] + 999, 1000) + 1

  elseif alg == 'f' then
    -- The fixed window is a counter whose TTL is the window. When taking,
    -- it is incremented first (and taken back below if the request is
    -- refused), which spares a read; a key without a TTL, new or one that
    -- lost it to someone else's INCR, gets one here, so no key can block
    -- forever.
    local window = idiv(period + 999, 1000)
    local count, pttl
    if consume then
      count = redis.call('INCRBY', key, cost) - cost
      pttl = redis.call('PTTL', key)
      if pttl < 0 then
        redis.call('PEXPIRE', key, window)
        pttl = window
      end
    else
      count = tonumber(redis.call('GET', key) or '0')
      pttl = redis.call('PTTL', key)
      if pttl == -1 then
        redis.call('PEXPIRE', key, window)
      end
      if pttl < 0 then
        pttl = window
      end
    end
    local after = count + cost
    d[b + 1] = after <= rate
    if not d[b + 1] then
      d[b + 6] = pttl * 1000
    end
    d[b + 2] = max(0, rate - count)
    d[b + 3] = max(0, rate - after)
    d[b + 4] = count > 0 and pttl * 1000 or 0
    d[b + 5] = pttl * 1000
    d[b + 7] = count

  elseif alg == 'l' then
    -- The sliding log is a sorted set of request times; entries older than
    -- a period are dropped first (that is not consumption).
    local t = clock()
    redis.call('ZREMRANGEBYSCORE', key, '-inf', t - period)
    local count = redis.call('ZCARD', key)
    local after = count + cost
    d[b + 1] = after <= rate
    if not d[b + 1] then
      -- The (after - rate)-th oldest entry must leave first.
      local e = redis.call('ZRANGE', key, after - rate - 1, after - rate - 1, 'WITHSCORES')
      d[b + 6] = tonumber(e[2]) + period - t
    end
    d[b + 2], d[b + 3] = rate - count, rate - after
    d[b + 4], d[b + 5] = 0, period
    if count > 0 then
      local e = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
      d[b + 4] = tonumber(e[2]) + period - t
    end

  else
    -- The sliding window keeps the counts of the current and the previous
    -- window (aligned to the clock) and admits while
    -- previous * (its part still within the last period) + current <= rate,
    -- multiplied through by period to stay in integers.
    local t = clock()
    local cur = idiv(t, period)
    local s = redis.call('HMGET', key, 'w', 'c', 'p')
    local w, c, p = tonumber(s[1]), tonumber(s[2]) or 0, tonumber(s[3]) or 0
    if w == cur - 1 then
      p, c = c, 0
    elseif w ~= cur then
      p, c = 0, 0
    end
    local start = cur * period
    local overlap = period - (t - start)
    local cap = rate * period
    local after = c + cost
    d[b + 1] = p * overlap + after * period <= cap
    if not d[b + 1] then
      local room = rate - after
      if room >= 0 then
        -- Later in this window, once the previous window's share is small
        -- enough: p * (period - e) <= room * period.
        d[b + 6] = start + period - idiv(room * period, p) - t
      else
        -- In the next window, where this one is the previous:
        -- c * (period - e) <= (rate - cost) * period.
        d[b + 6] = start + 2 * period - idiv((rate - cost) * period, c) - t
      end
    end
    d[b + 2] = idiv(max(0, cap - p * overlap - c * period), period)
    d[b + 3] = idiv(max(0, cap - p * overlap - after * period), period)
    d[b + 5] = start + 2 * period - t
    d[b + 4] = c > 0 and d[b + 5] or (p > 0 and start + period - t or 0)
    d[b + 7], d[b + 8], d[b + 9] = cur, after, p
  end
  all = all and d[b + 1]
end

-- Take the cost from every limit, or from none: a fixed window that was
-- incremented above is taken back.
local take = consume and all
local reply = {}
for i = 1, n do
  local a = 3 + (i - 1) * 5
  local alg, key, cost, b = ARGV[a + 1], KEYS[i], tonumber(ARGV[a + 5]), (i - 1) * 9
  if alg == 'f' then
    if consume and not take then
      if d[b + 7] == 0 then
        redis.call('DEL', key)
      else
        redis.call('DECRBY', key, cost)
      end
    end
  elseif take then
    if alg == 'g' then
      redis.call('SET', key, d[b + 7], 'PX', d[b + 8])
    elseif alg == 'l' then
      local args = {}
      for j = 1, cost do
        args[#args + 1] = now
        args[#args + 1] = token .. ':' .. j
        if #args >= 2000 or j == cost then
          redis.call('ZADD', key, unpack(args))
          args = {}
        end
      end
      redis.call('PEXPIRE', key, idiv(tonumber(ARGV[a + 3]) + 999, 1000))
    else
      redis.call('HSET', key, 'w', d[b + 7], 'c', d[b + 8], 'p', d[b + 9])
      redis.call('PEXPIRE', key, idiv(2 * tonumber(ARGV[a + 3]) + 999, 1000))
    end
  end
  local rem, reset = d[b + 2], d[b + 4]
  if take then
    rem, reset = d[b + 3], d[b + 5]
  end
  reply[#reply + 1] = d[b + 1] and 1 or 0
  reply[#reply + 1] = rem
  reply[#reply + 1] = d[b + 6]
  reply[#reply + 1] = reset
end
return reply
