-- take_one.lua: take.lua for one required count (Incr), written straight
-- through: on a busy server every table and closure a script creates
-- costs, and most calls count one thing.
--
-- KEYS and ARGV as take.lua with one count: KEYS[1..3] the period keys;
-- ARGV[1] the time in ms or ""; ARGV[2] n; ARGV[3] cap; ARGV[4] unused
-- (optional); ARGV[5], ARGV[6] the current period's bounds; ARGV[7..9]
-- the expiries (or ARGV[7] the TTL without a window).
--
-- Reply: as take.lua's, {allowed, value, counted, period}.
local j = period(ARGV[1], ARGV[5], ARGV[6])
local key = KEYS[j]
local got = redis.call('GET', key)
local before = tonumber(got) or 0
local n = tonumber(ARGV[2])
if before + n > tonumber(ARGV[3]) then
  return {0, before, 0, j}
end
local v = before + n
if ARGV[6] ~= '0' then
  redis.call('SET', key, string.format('%d', v), 'PXAT', ARGV[6 + j])
elseif got then
  redis.call('INCRBY', key, n)
else
  redis.call('SET', key, string.format('%d', v), 'PX', ARGV[7])
end
return {1, v, 1, j}
