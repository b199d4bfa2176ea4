-- extend.lua: reset the lease of a lock the caller still owns.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner token
-- ARGV[2]  new lease in milliseconds, counted from now
--
-- Reply: 1 extended; 0 not held by this owner.
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or v == ARGV[1] .. '+' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
