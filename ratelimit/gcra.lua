-- gcra.lua: the GCRA algorithm, for the decision scripts (scripts.go puts
-- it after common.lua). Like every algorithm file it decides one limit
-- and returns: admitted; remaining and reset after, before taking the cost
-- and after; retry after; and what taking the cost needs.

-- GCRA keeps the theoretical arrival time (TAT) as "us:frac", meaning
-- us + frac/rate microseconds, so that a period the rate does not divide
-- (7 a minute) accumulates no rounding. In units of 1/rate microseconds a
-- request is worth period, the allowance is burst * period, and ahead is
-- how far the TAT lies beyond now. Returns, last, the TAT to store and its
-- expiry in milliseconds.
local function gcra(key, rate, period, burst, cost)
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
  local retry = 0
  if after > cap then
    retry = idiv(after - cap + rate - 1, rate)
  end
  local us = idiv(after, rate)
  local reset = idiv(after + rate - 1, rate)
  return after <= cap, idiv(cap - min(ahead, cap), period), idiv(cap - min(after, cap), period),
    idiv(ahead + rate - 1, rate), reset, retry,
    string.format('%d:%d', t + us, after - us * rate), idiv(reset + 999, 1000) + 1
end
