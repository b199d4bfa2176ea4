-- unique_count.lua: estimate the distinct items added to HyperLogLogs.
-- ARGV[1] says which estimate.
--
-- "now": the items of the period the Redis clock is in.
--   KEYS     the keys of the previous, the current and the next period of
--            the window as the caller's clock sees them (without a window,
--            its one key three times)
--   ARGV[2]  the time in ms to decide by, or "" for Redis TIME
--   ARGV[3]  the current period's start in ms ("0" without a window)
--   ARGV[4]  the current period's end in ms ("0" without a window)
--
-- "union": the items added in any of several periods, each counted once.
--   KEYS[1]  a scratch key in the periods' slot, named at random by the
--            caller so that no one else uses it
--   KEYS[2..] the periods' keys (missing ones count as empty)
--   ARGV[2]  how long the scratch key may live, in ms, should the script
--            stop before deleting it
--
-- Reply: the estimate.
--
-- Why a scratch key: PFCOUNT of several keys is their union on Redis but
-- the sum of their counts on miniredis. Merging into one key and counting
-- that is the union on both, and merging into a key of our own leaves the
-- periods' keys as they were.
if ARGV[1] == 'now' then
  return redis.call('PFCOUNT', KEYS[period(ARGV[2], ARGV[3], ARGV[4])])
end

local scratch = KEYS[1]
redis.call('PFMERGE', scratch, unpack(KEYS, 2))
redis.call('PEXPIRE', scratch, ARGV[2])
local n = redis.call('PFCOUNT', scratch)
redis.call('DEL', scratch)
return n
