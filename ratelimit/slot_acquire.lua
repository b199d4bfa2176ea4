-- slot_acquire.lua: take one of at most `limit` slots of a concurrency
-- limit. Each slot is held under a lease that ends by itself, so a holder
-- that crashes without releasing gives its slot back when the lease ends.
--
-- KEYS[1]  the key's slots: a sorted set, member = slot id, score = the
--          lease's deadline in milliseconds since the epoch
-- ARGV[1]  now in milliseconds, or '' for Redis TIME (slot_common.lua)
-- ARGV[2]  limit: how many slots may be held at once
-- ARGV[3]  lease in milliseconds
-- ARGV[4]  the new slot's id (random, made by the caller: math.random is
--          not reproducible in scripts)
--
-- Reply: three integers: 1 acquired, 0 refused; how many slots are held
-- after the call; when refused, milliseconds until the earliest lease ends
-- (0 when acquired).
--
-- Why one script: dropping ended leases, counting and adding must happen
-- with nothing in between, or two callers both see limit-1 held and both
-- take the last slot. The set's TTL is moved to its latest deadline in the
-- same step, so the key never outlives its last lease; a set found without
-- a TTL (written by someone else) is given one back. A slot id already in
-- the set is a resent call whose reply was lost: it keeps its slot.
local key, limit, lease, id = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]

-- A lease whose deadline is now or earlier has ended.
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now))

local deadline = string.format('%d', now + lease)
if redis.call('ZSCORE', key, id) then
  redis.call('ZADD', key, deadline, id)
  expire_at_last()
  return {1, redis.call('ZCARD', key), 0}
end

local held = redis.call('ZCARD', key)
if held < limit then
  redis.call('ZADD', key, deadline, id)
  expire_at_last()
  return {1, held + 1, 0}
end

if redis.call('PTTL', key) == -1 then
  expire_at_last()
end
local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
return {0, held, tonumber(first[2]) - now}
