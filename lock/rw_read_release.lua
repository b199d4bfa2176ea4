-- rw_read_release.lua: give a read share back, if the caller still has it.
--
-- KEYS[1]  readers (see rw_read.lua)
-- KEYS[2]  writer waiting
-- KEYS[3]  lock key (its channel is KEYS[3] .. ':released')
-- ARGV[1]  owner token
--
-- Reply: 0 not held (the share expired); 1 released; 2 released, the
-- last share, and the waiting writer was told.

if not give_back(KEYS[1], ARGV[1]) then
  return 0
end
if redis.call('ZCARD', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PUBLISH', KEYS[3] .. ':released', '')
  return 2
end
return 1
