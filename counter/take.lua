-- take.lua: count n against each of several capped counters, all or
-- nothing: if any required count would go over its cap, nothing is
-- counted anywhere. Optional counts are then made only where they fit.
--
-- KEYS     three per count: the keys of the previous, the current and the
--          next period of its window as the caller's clock sees them (for a
--          count without a window, its one key three times)
-- ARGV[1]  the time in ms to decide by, or "" for Redis TIME
-- then eight per count:
--   n         what to add (> 0)
--   cap       the most the count may reach (>= 0)
--   optional  "1": count it only if it fits, and never refuse the call for
--             it; "0": required
--   start end the current period's bounds in ms; "0" "0" without a window
--   e1 e2 e3  each period key's expiry in ms since the epoch; without a
--             window, e1 is the TTL in ms from creation (> 0)
--
-- Reply: {allowed, then per count: value, counted, period}: allowed and
-- counted are 1 or 0; value is the count after this call; period is 1, 2
-- or 3, the key the Redis clock chose.
--
-- Why the caller's three periods (period.lua): the period is named in the key, so the
-- count of today cannot be reset by an expiry at midnight; the caller
-- computes the names (it knows the time zone rules), and the script picks
-- one by the Redis clock, so machines with skewed clocks agree.
--
-- Writes use SET with PXAT for a windowed count: the value and its expiry
-- in one call, which also gives back an expiry someone removed. A count
-- without a window keeps the TTL it was born with (INCRBY).
local count = #KEYS / 3
-- Count i's arguments start after ARGV[a] with a = 1 + 8 * (i - 1):
-- a+1 n, a+2 cap, a+3 optional, a+4 start, a+5 end, a+6..a+8 e1..e3.
-- Indexed directly, with no helper closures: on a busy server every
-- closure and table a script creates costs.
local keys, chosen = {}, {}
for i = 1, count do
  local a = 8 * i - 7
  local j = period(ARGV[1], ARGV[a + 4], ARGV[a + 5])
  chosen[i] = j
  keys[i] = KEYS[3 * i - 3 + j]
end
local got = redis.call('MGET', unpack(keys))

-- value[key] is the count as decided so far, so that two counts of one
-- key see each other (got[i] is the same for every i of one key).
local value, counted = {}, {}
local allowed = 1
for pass = 1, 2 do
  -- Pass 1 decides the required counts, pass 2 the optional ones.
  local want = pass == 1 and '0' or '1'
  for i = 1, count do
    local a = 8 * i - 7
    if ARGV[a + 3] == want then
      local k = keys[i]
      local v = (value[k] or tonumber(got[i]) or 0) + tonumber(ARGV[a + 1])
      if v <= tonumber(ARGV[a + 2]) then
        value[k] = v
        counted[i] = true
      elseif pass == 1 then
        allowed = 0
        break
      end
    end
  end
  if allowed == 0 then
    break
  end
end

local reply, written = {allowed}, {}
for i = 1, count do
  local a, k = 8 * i - 7, keys[i]
  local before = tonumber(got[i])
  local v = value[k]
  if allowed == 0 or not v then
    v = before or 0
  elseif counted[i] and not written[k] then
    written[k] = true -- once per key, with its final value
    if ARGV[a + 5] ~= '0' then
      redis.call('SET', k, string.format('%d', v), 'PXAT', ARGV[a + 5 + chosen[i]])
    elseif before then
      redis.call('INCRBY', k, v - before)
    else
      redis.call('SET', k, string.format('%d', v), 'PX', ARGV[a + 6])
    end
  end
  reply[3 * i - 1], reply[3 * i], reply[3 * i + 1] = v, (allowed == 1 and counted[i]) and 1 or 0, chosen[i]
end
return reply
