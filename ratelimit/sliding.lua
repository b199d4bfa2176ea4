-- sliding.lua: the sliding log and the sliding window, for allow.lua
-- (scripts.go puts it after common.lua). Each returns as gcra.lua
-- describes.

-- The sliding log is a sorted set of request times; entries older than a
-- period are dropped first (that is not consumption).
local function sliding_log(key, rate, period, cost)
  local t = clock()
  redis.call('ZREMRANGEBYSCORE', key, '-inf', t - period)
  local count = redis.call('ZCARD', key)
  local after = count + cost
  local retry = 0
  if after > rate then
    -- The (after - rate)-th oldest entry must leave first.
    local e = redis.call('ZRANGE', key, after - rate - 1, after - rate - 1, 'WITHSCORES')
    retry = tonumber(e[2]) + period - t
  end
  local reset = 0
  if count > 0 then
    local e = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    reset = tonumber(e[2]) + period - t
  end
  return after <= rate, rate - count, rate - after, reset, period, retry
end

-- sliding_log_take records cost requests at now, each under its own member.
local function sliding_log_take(key, period, cost, token)
  local args = {}
  for j = 1, cost do
    args[#args + 1] = now
    args[#args + 1] = token .. ':' .. j
    if #args >= 2000 or j == cost then
      redis.call('ZADD', key, unpack(args))
      args = {}
    end
  end
  redis.call('PEXPIRE', key, idiv(period + 999, 1000))
end

-- The sliding window keeps the counts of the current and the previous
-- window (aligned to the clock) and admits while
-- previous * (its part still within the last period) + current <= rate,
-- multiplied through by period to stay in integers. Returns, last, what to
-- store: the window's index, its count after this request, the previous
-- window's count.
local function sliding_window(key, rate, period, cost)
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
  local ok = p * overlap + after * period <= cap
  local retry = 0
  if not ok then
    local room = rate - after
    if room >= 0 then
      -- Later in this window, once the previous window's share is small
      -- enough: p * (period - e) <= room * period.
      retry = start + period - idiv(room * period, p) - t
    else
      -- In the next window, where this one is the previous:
      -- c * (period - e) <= (rate - cost) * period.
      retry = start + 2 * period - idiv((rate - cost) * period, c) - t
    end
  end
  local reset1 = start + 2 * period - t
  local reset0 = c > 0 and reset1 or (p > 0 and start + period - t or 0)
  return ok, idiv(max(0, cap - p * overlap - c * period), period),
    idiv(max(0, cap - p * overlap - after * period), period), reset0, reset1, retry, cur, after, p
end

-- sliding_window_take stores the window's counts.
local function sliding_window_take(key, period, cur, after, p)
  redis.call('HSET', key, 'w', cur, 'c', after, 'p', p)
  redis.call('PEXPIRE', key, idiv(2 * period + 999, 1000))
end
