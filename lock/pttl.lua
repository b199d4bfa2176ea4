-- pttl.lua: the remaining lease of a lock the caller still owns (read only).
--
-- KEYS[1]  lock key
-- ARGV[1]  owner token
--
-- Reply: the remaining lease in milliseconds; -3 when not held by this owner.
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or v == ARGV[1] .. '+' then
  return redis.call('PTTL', KEYS[1])
end
return -3
