-- fair_release.lua: release.lua for a fair lock. Its release message names
-- the first waiter in the queue, so that only that waiter's process tries
-- (the others would only renew their places), instead of every waiting
-- process at once.
--
-- KEYS[1]  lock key
-- KEYS[2]  queue (see fair_acquire.lua)
-- ARGV[1]  owner token
--
-- Reply: as release.lua: 0 not held, 1 released, 2 released and the
-- first waiter told on the channel KEYS[1] .. ':released'.

local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] and v ~= ARGV[1] .. '+' then
  return 0
end
redis.call('DEL', KEYS[1])
if v == ARGV[1] then
  return 1
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1] or ''
redis.call('PUBLISH', KEYS[1] .. ':released', first)
return 2
