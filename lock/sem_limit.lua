-- sem_limit.lua: set a semaphore's number of permits.
--
-- KEYS[1]  permits (see sem_acquire.lua)
-- KEYS[2]  limit
-- KEYS[3]  wanted
-- ARGV[1]  the new limit
--
-- Reply: the previous limit, or 0 if none was stored. Raising the limit
-- frees permits, so waiters are told as for a release. Lowering it takes
-- no permit back: holders keep theirs until they release them, and no new
-- one is handed out until fewer than the new limit are held.

local old = tonumber(redis.call('GET', KEYS[2])) or 0
redis.call('SET', KEYS[2], ARGV[1])
if tonumber(ARGV[1]) > old and redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('PUBLISH', KEYS[1] .. ':released', '')
end
return old
