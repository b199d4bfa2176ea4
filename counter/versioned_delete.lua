-- versioned_delete.lua: compare-and-delete of a versioned value. Deletes it
-- only if the stored version is the one the caller expects.
--
-- KEYS[1]  the value's hash: fields data, ver and w (versioned_set.lua
--          says how a version is stored)
-- ARGV[1]  expected version, microseconds part
-- ARGV[2]  expected version, sequence part (0..999); never both 0 (Go
--          refuses: a value that does not exist cannot be deleted)
-- ARGV[3]  how long the tombstone lasts, in ms
--
-- The value is not deleted outright: its data and ver go, and the hash
-- keeps the version in dver, and the tokens w and c, expiring after
-- ARGV[3] (versioned_common.lua). A create resent by go-redis after its
-- reply was lost, whose first run created the value this deletes, finds
-- its own token there and does not create it again; and a new value's
-- version passes the deleted one's.
--
-- Reply: {1, 0, 0}: deleted.
--        {0, us, seq}: not deleted; the current version's parts ({0, 0, 0}:
--        the value does not exist: deleted, perhaps by this call's first
--        run if this is a resend, or expired; Go says so, not "conflict").
local key = KEYS[1]
local us, seq, ver, bad = current_version(key)
if bad then
  return bad
end

if not ver or us ~= tonumber(ARGV[1]) or seq ~= tonumber(ARGV[2]) then
  return {0, us, seq}
end
redis.call('HDEL', key, 'data', 'ver')
redis.call('HSET', key, 'dver', ver)
redis.call('PEXPIRE', key, ARGV[3])
return {1, 0, 0}
