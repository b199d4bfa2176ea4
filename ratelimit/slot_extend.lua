-- slot_extend.lua: give a slot of a concurrency limit a new lease, counted
-- from now, if its current lease has not ended.
--
-- KEYS[1]  the key's slots: a sorted set, member = slot id, score = the
--          lease's deadline in milliseconds since the epoch
-- ARGV[1]  now in milliseconds, or '' for Redis TIME (slot_common.lua)
-- ARGV[2]  slot id
-- ARGV[3]  new lease in milliseconds
--
-- Reply: 1 extended; 0 the slot was not held: its lease had ended or it was
-- released.
--
-- Why one script: an ended lease must not come back to life (another
-- request may hold the slot now), so the deadline check and the new
-- deadline are one step; and the set's TTL follows its latest deadline in
-- the same step, so the key never outlives its last lease nor dies before
-- it.
local key, id = KEYS[1], ARGV[2]
local deadline = redis.call('ZSCORE', key, id)
if not deadline then
  return 0
end
if tonumber(deadline) <= now then
  redis.call('ZREM', key, id)
  return 0
end
redis.call('ZADD', key, string.format('%d', now + tonumber(ARGV[3])), id)
expire_at_last()
return 1
