-- acquire.lua: take the lock if it is free and hand out a fencing token.
--
-- KEYS[1]  lock key: a string holding the owner token, followed by "+" once
--          a waiter has asked to be told when it is released
-- KEYS[2]  fence key: an integer counter, the last fencing token handed out;
--          it expires an hour (3600000 ms) after it is created
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  "1" if the caller will wait for a release message when the lock
--          is taken (then the holder is flagged with "+"), else "0"
-- KEYS[3]  (reentrant acquisitions only) holds: a hash of the owner's
--          hold ids, one per acquisition not yet released; it expires with
--          the lock
-- ARGV[4]  (reentrant acquisitions only) this acquisition's hold id
-- ARGV[5]  (reentrant acquisitions only) "1" to re-enter only: add a hold
--          if the owner holds the lock already, and otherwise leave the
--          lock alone, even if it is free (a waiter that joins its
--          Client's queue behind others must not take a free lock before
--          them); else "0"
--
-- Reply: one integer, to keep the hot path free of tables. A positive reply
-- is the fence: the lock is obtained. A reply r <= -1 means another owner
-- holds it with -r-2 milliseconds of lease left (-1: the key has no TTL, so
-- it is not a lock of ours; -2: it expired during the call, or is free and
-- ARGV[5] asked to re-enter only; try again). A
-- repeated call with the same owner token is answered like the first, so a
-- resent command is harmless.
--
-- SET NX PX creates the key and its expiry in one command: there is no
-- moment at which the lock exists without a TTL. With GET it also returns
-- the current holder's value when the key exists, which saves a read.

local holder
if ARGV[5] == '1' then
  holder = redis.call('GET', KEYS[1])
  if not holder then
    return -2
  end
else
  holder = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
end
local fence
if not holder then
  fence = new_fence(KEYS[2])
  if KEYS[3] then
    -- Holds left by an earlier owner expired with its lock; start afresh.
    redis.call('DEL', KEYS[3])
    redis.call('HSET', KEYS[3], ARGV[4], 1)
    redis.call('PEXPIRE', KEYS[3], ARGV[2])
  end
elseif holder == ARGV[1] or holder == ARGV[1] .. '+' then
  -- A retry of an attempt that succeeded but whose reply was lost, or a
  -- reentrant owner taking the lock again. Only a new holder moves the
  -- fence, so it still holds this owner's token.
  fence = current_fence(KEYS[2])
  if KEYS[3] then
    -- One more hold (a resent call adds the same id again: no change).
    -- The lock's lease becomes the longer of what is left and ARGV[2].
    local pttl = redis.call('PTTL', KEYS[1])
    if pttl < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
      pttl = tonumber(ARGV[2])
    end
    redis.call('HSET', KEYS[3], ARGV[4], 1)
    redis.call('PEXPIRE', KEYS[3], pttl)
  end
else
  return busy(KEYS[1], holder, ARGV[3])
end
return fence
