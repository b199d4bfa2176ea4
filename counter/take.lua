-- take.lua: count n against each of several capped counters, all or
-- nothing: if any required count would go over its cap, nothing is
-- counted anywhere. Optional counts are then made only where they fit.
--
-- KEYS     one per count: the key of the period the caller's clock is in
--          (prefix{key}:<period label>), or the count's key without a
--          window
-- ARGV[1]  the time in ms to decide by, or "" for Redis TIME
-- then six per count:
--   n         what to add (> 0)
--   cap       the most the count may reach (>= 0)
--   optional  "1": count it only if it fits, and never refuse the call for
--             it; "0": required
--   start end the period's bounds in ms; "0" "0" without a window
--   expiry    the period key's expiry in ms since the epoch; without a
--             window, the TTL in ms from creation
--
-- Reply: {allowed, then per count: value, counted}: allowed and counted
-- are 1 or 0; value is the count after this call. Or {-1, now} when the
-- Redis clock is not in a period named (period.lua): nothing was counted.
--
-- A resend of this script (go-redis, after a lost reply) counts again,
-- within the caps: the count stays a plain decimal other tools can GET,
-- with no room for a call's token (doc.go, "Calls sent twice").
--
-- Why periods in key names: the count of today cannot be reset by an
-- expiry at midnight. The caller computes the names (it knows the time
-- zone rules); the Redis clock checks them, so machines with skewed clocks
-- agree.
--
-- Writes use SET with PXAT for a windowed count: the value and its expiry
-- in one call, which also gives back an expiry someone removed. A count
-- without a window keeps the TTL it was born with (SET XX KEEPTTL); if the
-- key is gone by then (a server whose clock moves during a script, as
-- miniredis's can: a real Redis holds its clock still while a script
-- runs), it is written again with a fresh TTL rather than without one.
local count = #KEYS
-- Count i's arguments follow ARGV[a] with a = 6 * i - 5: a+1 n, a+2 cap,
-- a+3 optional, a+4 start, a+5 end, a+6 expiry. Indexed directly, with no
-- helper closures: on a busy server every closure and table a script
-- creates costs.
for i = 1, count do
  local a = 6 * i - 5
  if outside(ARGV[1], ARGV[a + 4], ARGV[a + 5]) then
    return {-1, clock_now}
  end
end
local got = redis.call('MGET', unpack(KEYS))

-- value[key] is the count as decided so far, so that two counts of one
-- key see each other (got[i] is the same for every i of one key).
local value, counted = {}, {}
local allowed = 1
for pass = 1, 2 do
  -- Pass 1 decides the required counts, pass 2 the optional ones.
  local want = pass == 1 and '0' or '1'
  for i = 1, count do
    local a = 6 * i - 5
    if ARGV[a + 3] == want then
      local k = KEYS[i]
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
  local a, k = 6 * i - 5, KEYS[i]
  local before = tonumber(got[i])
  local v = value[k]
  if allowed == 0 or not v then
    v = before or 0
  elseif counted[i] and not written[k] then
    written[k] = true -- once per key, with its final value
    if ARGV[a + 5] ~= '0' then
      redis.call('SET', k, string.format('%d', v), 'PXAT', ARGV[a + 6])
    elseif not before or not redis.call('SET', k, string.format('%d', v), 'XX', 'KEEPTTL') then
      redis.call('SET', k, string.format('%d', v), 'PX', ARGV[a + 6])
    end
  end
  reply[2 * i], reply[2 * i + 1] = v, (allowed == 1 and counted[i]) and 1 or 0
end
return reply
