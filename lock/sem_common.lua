-- sem_common.lua is prepended to the semaphore scripts. A semaphore is a
-- sorted set of permits (KEYS[1]): each member an owner token, its score
-- the permit's expiry in Redis milliseconds.

-- now returns Redis's clock in milliseconds.
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- expire_at_last makes the set expire with its last permit, so a
-- semaphore nobody uses leaves no permits behind.
local function expire_at_last(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', key, last[2])
  end
end
