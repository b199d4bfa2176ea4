-- create.lua: create one bucket of an item if it does not exist.
--
-- KEYS     the bucket's three keys (records.lua)
-- ARGV[1]  this bucket's units
-- ARGV[2]  n, the item's number of buckets
-- ARGV[3]  k, this bucket's index
-- ARGV[4]  the per-buyer limit (0 = none)
-- ARGV[5]  the item's lifetime in ms, used when ARGV[6] is 0
-- ARGV[6]  the item's expiry (ms since the epoch, Redis clock), or 0 to
--          start it now: bucket 0 starts it and the others share it
-- ARGV[7]  the Create call's id, random per call, kept as field "c": a
--          run resent by go-redis after a lost reply finds its own id and
--          answers "created" as the first run did
-- ARGV[8]  the item's total units, kept as field "tc": a Create that
--          finds bucket 0 made by another call splits that call's total
--          over the buckets still missing, not its own
--
-- Reply: {1, expiry} created; {0, expiry, tc} it exists with these
-- settings (tc -1 if not kept); {-1} it exists with other settings.
--
-- All three keys are created here, with the expiry; the list and the zset
-- hold one empty placeholder each so that they exist, and no later script
-- ever creates a key (or one without its TTL). Scripts skip the
-- placeholders.
local s = redis.call('HMGET', KEYS[1], 'n', 'k', 'limit', 'exp', 'c', 'tc')
if s[1] then
  if s[1] == ARGV[2] and s[2] == ARGV[3] and s[3] == ARGV[4] then
    if s[5] == ARGV[7] then
      return {1, tonumber(s[4])}
    end
    return {0, tonumber(s[4]), tonumber(s[6]) or -1}
  end
  return {-1}
end
local exp = tonumber(ARGV[6])
if exp == 0 then
  exp = records().now_ms() + tonumber(ARGV[5])
end
redis.call('HSET', KEYS[1], 'total', ARGV[1], 'available', ARGV[1], 'held', 0, 'sold', 0,
  'n', ARGV[2], 'k', ARGV[3], 'limit', ARGV[4], 'exp', string.format('%d', exp), 'c', ARGV[7], 'tc', ARGV[8])
redis.call('ZADD', KEYS[2], '+inf', '')
redis.call('RPUSH', KEYS[3], '')
for i = 1, 3 do
  redis.call('PEXPIREAT', KEYS[i], exp)
end
return {1, exp}
