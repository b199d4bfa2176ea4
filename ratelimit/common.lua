-- common.lua: the start of every rate-limit decision script (scripts.go
-- puts it first, then the algorithms it uses, then its own part).
--
-- Every decision script takes the same arguments:
--
-- KEYS     one key per limit
-- ARGV[1]  now in microseconds, or '' for Redis TIME (tests pin the clock)
-- ARGV[2]  '1' to consume when admitted, '0' to only look (peek)
-- ARGV[3]  a token unique to this call (names sliding-log entries)
-- then five per limit: algorithm (g gcra, f fixed window, l sliding log,
-- w sliding window), rate, period in microseconds, burst, cost
--
-- and replies with four integers per limit: admitted by this limit (1/0),
-- remaining, retry after (microseconds until a request of this cost would
-- be admitted; 0 if it is now), reset after (microseconds until the limit
-- is back to full). Remaining and reset describe the state after the call:
-- with the cost taken if the request was admitted and consumed, as before
-- otherwise.
--
-- All arithmetic is on integers below 2^52 (the Go side checks the rates),
-- which Lua's doubles hold exactly.
local consume = ARGV[2] == '1'

-- Redis TIME is read once, and only by the algorithms that need it.
local now = tonumber(ARGV[1])
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return now
end

-- idiv is floor(x / y) for integers x >= 0, y > 0, corrected for the
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
