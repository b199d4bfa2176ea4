-- extend.lua: reset the lease of a lock the caller still owns.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner token
-- ARGV[2]  new lease in milliseconds, counted from now
-- KEYS[2]  (reentrant holds only) the owner's holds (see acquire.lua):
--          they expire with the lock, and since they share its lease one
--          hold's extension never shortens it
-- ARGV[3]  (reentrant holds only) the caller's hold id: a hold already
--          released must not stretch the lease of the owner's others
--
-- Reply: 1 extended; 0 not held by this owner (or this hold).
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] and v ~= ARGV[1] .. '+' then
  return 0
end
if not KEYS[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if redis.call('HEXISTS', KEYS[2], ARGV[3]) == 0 then
  return 0
end
local ttl = math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
return 1
