-- slot_release.lua: give back a slot of a concurrency limit, if its lease
-- has not ended.
--
-- KEYS[1]  the key's slots: a sorted set, member = slot id, score = the
--          lease's deadline in milliseconds since the epoch
-- ARGV[1]  now in milliseconds, or '' for Redis TIME (slot_common.lua)
-- ARGV[2]  slot id
--
-- Reply: 1 released; 0 the slot was not held: its lease had ended (another
-- request may have been admitted in its place) or it was released before.
-- A second run of one release (go-redis resends a script whose reply was
-- lost) answers 0 too; Slot.Release tells it from a lost lease by the
-- time: a 0 before the lease can have ended is a release of its own.
--
-- Why one script: a slot whose lease has ended is no longer its holder's
-- even while it is still in the set (nobody has swept it yet), so reading
-- its deadline, comparing it with now and removing it are one step. An
-- ended slot is removed too: it is garbage either way. Removing a member
-- never needs a TTL change: the set's TTL already covers every deadline
-- left in it.
local deadline = redis.call('ZSCORE', KEYS[1], ARGV[2])
if not deadline then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[2])
if tonumber(deadline) <= now then
  return 0
end
return 1
