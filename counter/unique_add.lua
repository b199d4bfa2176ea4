-- unique_add.lua: add items to the HyperLogLog of the period the Redis
-- clock is in, and give the key its expiry in the same step.
--
-- KEYS     the keys of the previous, the current and the next period of
--          the window as the caller's clock sees them (without a window,
--          its one key three times)
-- ARGV[1]  the time in ms to decide by, or "" for Redis TIME
-- ARGV[2]  the current period's start in ms ("0" without a window)
-- ARGV[3]  the current period's end in ms ("0" without a window)
-- ARGV[4..6] each period key's expiry in ms since the epoch ("0": none)
-- ARGV[7..] the items, at least one
--
-- Reply: 1 if the estimate changed (PFADD's reply), else 0.
--
-- The expiry is set on every add, not only when the key is born: it is
-- the same instant each time (the period's end plus a fixed margin), so
-- it costs one cheap command and gives back an expiry someone removed.
local j = period(ARGV[1], ARGV[2], ARGV[3])
local key = KEYS[j]

-- unpack() of many values overflows Lua's C stack (about 8000 slots on
-- Redis): add the items in slices.
local changed, slice = 0, 1000
for i = 7, #ARGV, slice do
  if redis.call('PFADD', key, unpack(ARGV, i, math.min(i + slice - 1, #ARGV))) == 1 then
    changed = 1
  end
end

local at = ARGV[3 + j]
if at ~= '0' then
  redis.call('PEXPIREAT', key, at)
end
return changed
