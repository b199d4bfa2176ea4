-- sem_ttl.lua: a permit's lease left. Read-only.
--
-- KEYS[1]  permits (see sem_acquire.lua)
-- ARGV[1]  owner token
--
-- Reply: milliseconds left, or -3 if the caller does not hold the permit.

local expiry = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if not expiry then
  return -3
end
local left = expiry - now_ms()
if left <= 0 then
  return -3
end
return left
