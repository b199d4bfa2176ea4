-- undo.lua: takes a party out of its dorm and gives the beds back, exactly
-- once: a second undo (a double click, a retried request) finds the party
-- unplaced and returns nothing.
--
-- KEYS[1]  the batch's state hash (see assign.lua)
-- KEYS[2]  the batch's assignment log
-- ARGV[1]  the log's TTL in ms
-- ARGV[2..] the party's members
--
-- Reply: the dorm the party left, or false if it had no bed.
local state = KEYS[1]
local dorm = redis.call('HGET', state, 'placed:' .. ARGV[2])
if not dorm then
  return false
end
for i = 2, #ARGV do
  local m = ARGV[i]
  if redis.call('HGET', state, 'placed:' .. m) == dorm then
    redis.call('HDEL', state, 'placed:' .. m)
    redis.call('HINCRBY', state, 'beds:' .. dorm, 1)
    if redis.call('RPUSH', KEYS[2], '- ' .. m .. ' ' .. dorm) == 1 then
      redis.call('PEXPIRE', KEYS[2], ARGV[1])
    end
  end
end
return dorm
