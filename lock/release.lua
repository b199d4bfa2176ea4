-- release.lua: delete the lock if, and only if, the caller still owns it.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner token
--
-- Reply: 0 not held by this owner (expired, or taken by someone else);
-- 1 released; 2 released and waiters were told on the channel
-- KEYS[1] .. ':released'.
--
-- The message is sent only when a waiter flagged the lock ("+"), so an
-- uncontended release costs no PUBLISH (which Redis Cluster would broadcast
-- to every node).
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if v == ARGV[1] .. '+' then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[1] .. ':released', '')
  return 2
end
return 0
