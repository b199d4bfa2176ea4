-- release.lua: delete the lock if, and only if, the caller still owns it.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner token
-- KEYS[2]  (reentrant holds only) the owner's holds (see acquire.lua)
-- ARGV[2]  (reentrant holds only) the hold id to release
--
-- Reply: 0 not held by this owner (expired, or taken by someone else, or
-- this hold already released); 1 released; 2 released and waiters were
-- told on the channel KEYS[1] .. ':released'; 3 this hold released, the
-- owner's other holds keep the lock.
--
-- The message is sent only when a waiter flagged the lock ("+"), so an
-- uncontended release costs no PUBLISH (which Redis Cluster would broadcast
-- to every node).
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] and v ~= ARGV[1] .. '+' then
  return 0
end
if KEYS[2] then
  if redis.call('HDEL', KEYS[2], ARGV[2]) == 0 then
    return 0
  end
  if redis.call('HLEN', KEYS[2]) > 0 then
    return 3
  end
end
redis.call('DEL', KEYS[1])
if v == ARGV[1] then
  return 1
end
redis.call('PUBLISH', KEYS[1] .. ':released', '')
return 2
