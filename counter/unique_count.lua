-- unique_count.lua: estimate the distinct items added to HyperLogLogs.
-- ARGV[1] says which estimate.
--
-- "now": the items of the period the Redis clock is in.
--   KEYS[1]  the key of the period the caller's clock is in (without a
--            window, the count's one key)
--   ARGV[2]  the time in ms to decide by, or "" for Redis TIME
--   ARGV[3]  the period's start in ms ("0" without a window)
--   ARGV[4]  the period's end in ms ("0" without a window)
--
-- "union": the items added in any of several periods, each counted once.
--   KEYS[1]  a scratch key in the periods' slot, named at random by the
--            caller so that no one else uses it
--   KEYS[2..] the periods' keys (missing ones count as empty)
--   ARGV[2]  how long the scratch key may live, in ms, should the script
--            stop before deleting it
--
-- Reply: {estimate}; or, for "now", {-1, now} when the Redis clock is not
-- in the period named (period.lua).
--
-- Why a scratch key: PFCOUNT of several keys is their union on Redis but
-- the sum of their counts on miniredis. Merging into one key and counting
-- that is the union on both, and merging into a key of our own leaves the
-- periods' keys as they were.
if ARGV[1] == 'now' then
  if outside(ARGV[2], ARGV[3], ARGV[4]) then
    return {-1, clock_now}
  end
  return {redis.call('PFCOUNT', KEYS[1])}
end

local scratch = KEYS[1]
redis.call('PFMERGE', scratch, unpack(KEYS, 2))
redis.call('PEXPIRE', scratch, ARGV[2])
local n = redis.call('PFCOUNT', scratch)
redis.call('DEL', scratch)
return {n}
