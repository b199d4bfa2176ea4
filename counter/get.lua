-- get.lua: read a capped count in the period the Redis clock is in.
--
-- KEYS[1]  the count's key (see take_batch.lua)
-- ARGV     the time in ms ("" for Redis TIME), then the period's start and
--          end in ms ("0" "0" without a window)
--
-- Reply: {1, value}; or {-1, now} when the Redis clock is not in the
-- period named (period.lua); or {-2, 0} when the key holds another type
-- than a string, or a string that is not a number.
if outside(ARGV[1], ARGV[2], ARGV[3]) then
  return {-1, clock_now}
end
local got = redis.pcall('GET', KEYS[1])
if type(got) == 'table' then
  -- Only WRONGTYPE is another type (take_one.lua).
  if not string.find(got.err or '', 'WRONGTYPE', 1, true) then
    return got
  end
  return {-2, 0}
end
local v = tonumber(got)
if got and not v then
  return {-2, 0}
end
return {1, v or 0}
