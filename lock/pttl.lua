-- pttl.lua: the remaining lease of a lock the caller still owns (read only).
--
-- KEYS[1]  lock key
-- ARGV[1]  owner token
-- KEYS[2]  (reentrant holds only) the owner's holds (see acquire.lua)
-- ARGV[2]  (reentrant holds only) the caller's hold id: a released hold
--          no longer owns the lock, though its owner may
--
-- Reply: the remaining lease in milliseconds; -3 when not held by this
-- owner (or this hold).
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] and v ~= ARGV[1] .. '+' then
  return -3
end
if KEYS[2] and redis.call('HEXISTS', KEYS[2], ARGV[2]) == 0 then
  return -3
end
return redis.call('PTTL', KEYS[1])
