-- unique_add.lua: add items to the HyperLogLog of the period the Redis
-- clock is in, and give the key its expiry in the same step.
--
-- KEYS[1]  the key of the period the caller's clock is in (without a
--          window, the count's one key)
-- ARGV[1]  the time in ms to decide by, or "" for Redis TIME
-- ARGV[2]  the period's start in ms ("0" without a window)
-- ARGV[3]  the period's end in ms ("0" without a window)
-- ARGV[4]  the key's expiry in ms since the epoch ("0": none)
-- ARGV[5..] the items, at least one
--
-- Reply: {1} if the estimate changed (PFADD's reply), else {0} (so {0}
-- from a resend whose first run added the items); or {-1, now} when the
-- Redis clock is not in the period named (period.lua).
--
-- The expiry is set on every add, not only when the key is born: it is
-- the same instant each time (the period's end plus a fixed margin), so
-- it costs one cheap command and gives back an expiry someone removed.
if outside(ARGV[1], ARGV[2], ARGV[3]) then
  return {-1, clock_now}
end
local key = KEYS[1]

-- unpack() of many values overflows Lua's C stack (about 8000 slots on
-- Redis): add the items in slices.
local changed, slice = 0, 1000
for i = 5, #ARGV, slice do
  if redis.call('PFADD', key, unpack(ARGV, i, math.min(i + slice - 1, #ARGV))) == 1 then
    changed = 1
  end
end

if ARGV[4] ~= '0' then
  redis.call('PEXPIREAT', key, ARGV[4])
end
return {changed}
