-- take_one.lua: take_batch.lua for a lone call of one required count
-- (Incr), written straight through: on a busy server every table and
-- closure a script creates costs, and most calls count one thing.
--
-- KEYS[1]  the count's key (see take_batch.lua)
-- ARGV     the time in ms or ""; then n, cap, start, end, expiry, as for
--          one count of take_batch.lua but without "optional"
--
-- Reply: {allowed, value, counted}, as take_batch.lua's; or {-1, now} when
-- the Redis clock is not in the period named (period.lua); or {-2, 0, 0}
-- when the key holds another type than a string, or a string that is not a
-- number, which is left as it is. A resend counts again, within the cap, as
-- take_batch.lua's does.
if outside(ARGV[1], ARGV[4], ARGV[5]) then
  return {-1, clock_now}
end
local key = KEYS[1]
local got = redis.pcall('GET', key)
if type(got) == 'table' then
  -- Only WRONGTYPE is another type; any other error (an ACL's refusal,
  -- say) is the caller's to see as it is.
  if not string.find(got.err or '', 'WRONGTYPE', 1, true) then
    return got
  end
  return {-2, 0, 0}
end
local before = tonumber(got)
if got and not before then
  -- A string that is not a number is not a count either (see
  -- take_batch.lua): left as it is.
  return {-2, 0, 0}
end
before = before or 0
local v = before + tonumber(ARGV[2])
if v > tonumber(ARGV[3]) then
  return {0, before, 0}
end
-- Written as take_batch.lua's write() does, and for its reasons.
local windowed = ARGV[5] ~= '0'
if before ~= 0 and redis.pcall('INCRBY', key, ARGV[2]) == v then
  if windowed then
    redis.call('PEXPIREAT', key, ARGV[6])
  end
elseif windowed then
  redis.call('SET', key, string.format('%d', v), 'PXAT', ARGV[6])
else
  redis.call('SET', key, string.format('%d', v), 'PX', ARGV[6])
end
return {1, v, 1}
