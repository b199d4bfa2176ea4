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
--             window, e1 is a TTL in ms from creation ("0": none)
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
-- arg(i, f) is count i's argument f: 1 n, 2 cap, 3 optional, 4 start,
-- 5 end, 6..8 e1..e3.
local function arg(i, f)
  return ARGV[1 + 8 * (i - 1) + f]
end

local chosen, keys = {}, {}
for i = 1, count do
  chosen[i] = period(ARGV[1], arg(i, 4), arg(i, 5))
  keys[i] = KEYS[3 * (i - 1) + chosen[i]]
end
local got = redis.call('MGET', unpack(keys))

-- value[key] is the count as decided so far, so that two counts of one
-- key see each other.
local before, value = {}, {}
for i = 1, count do
  if before[keys[i]] == nil then
    before[keys[i]] = got[i] and tonumber(got[i]) or false
    value[keys[i]] = tonumber(got[i]) or 0
  end
end

local counted = {}
local function try(i)
  local v = value[keys[i]] + tonumber(arg(i, 1))
  if v > tonumber(arg(i, 2)) then
    return false
  end
  value[keys[i]] = v
  counted[i] = true
  return true
end

local allowed = 1
for i = 1, count do
  if arg(i, 3) ~= '1' and not try(i) then
    allowed = 0
    break
  end
end
if allowed == 1 then
  for i = 1, count do
    if arg(i, 3) == '1' then
      try(i)
    end
  end
end

local reply, written = {allowed}, {}
for i = 1, count do
  local k = keys[i]
  if allowed == 0 then
    value[k] = before[k] or 0
  elseif counted[i] and not written[k] then
    written[k] = true
    local v = string.format('%d', value[k])
    if arg(i, 5) ~= '0' then
      redis.call('SET', k, v, 'PXAT', arg(i, 5 + chosen[i]))
    elseif before[k] then
      redis.call('INCRBY', k, value[k] - before[k])
    elseif arg(i, 6) ~= '0' then
      redis.call('SET', k, v, 'PX', arg(i, 6))
    else
      redis.call('SET', k, v)
    end
  end
  reply[#reply + 1], reply[#reply + 2], reply[#reply + 3] = value[k], counted[i] and allowed or 0, chosen[i]
end
return reply
