-- get.lua: read a capped count in the period the Redis clock is in.
--
-- KEYS     the keys of the previous, the current and the next period of
--          the count's window as the caller's clock sees them (without a
--          window, its one key three times)
-- ARGV     the time in ms to decide by ("" for Redis TIME), then the
--          current period's start and end in ms ("0" "0" without a window)
--
-- Reply: {value, period}: period is 1, 2 or 3, the key the clock chose.
local j = period(ARGV[1], ARGV[2], ARGV[3])
return {tonumber(redis.call('GET', KEYS[j]) or '0'), j}
