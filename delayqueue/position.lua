-- position.lua: where a job stands in the queue: how many waiting jobs a
-- claim hands out before it.
--
-- Claims take due jobs in the order of the waiting zset: by due time, and
-- jobs due in the same millisecond by id. A job's rank in that zset is so
-- the number of jobs ahead of it, as long as no job due earlier arrives.
--
-- KEYS     the queue's keys (common.lua)
-- ARGV[1]  the job id
--
-- Reply: the number of jobs ahead (>= 0) if the job waits, -1 if it is in
-- flight, -2 if the queue does not have it.
local ahead = redis.call('ZRANK', KEYS[1], ARGV[1])
if ahead then
  return ahead
end
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return -1
end
return -2
