-- sem_release.lua: give a permit back, if the caller still holds it.
--
-- KEYS[1]  permits (see sem_acquire.lua)
-- KEYS[2]  wanted
-- ARGV[1]  owner token
--
-- Reply: 0 not held (expired, so already given back); 1 released; 2
-- released and waiters were told on the channel KEYS[1] .. ':released'.
-- The message goes out only while a waiter asked for it, so an
-- uncontended release costs no PUBLISH (which a cluster broadcasts).

if not give_back(KEYS[1], ARGV[1]) then
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PUBLISH', KEYS[1] .. ':released', '')
  return 2
end
return 1
