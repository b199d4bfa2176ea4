-- sem_common.lua is prepended to the scripts that keep leases in a sorted
-- set (a semaphore's permits, a read-write lock's read shares) or need
-- Redis's clock in milliseconds (the fair lock's places): each member an
-- owner token, its score the lease's expiry in Redis milliseconds.

-- now_ms returns Redis's clock in milliseconds.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- expire_at_last makes the set expire with its last lease, so a set
-- nobody uses leaves nothing behind.
local function expire_at_last(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', key, last[2])
  end
end

-- give_back removes token's lease from the sorted set key and reports
-- whether it was still live (false: not there, or expired, and so already
-- given back).
local function give_back(key, token)
  local expiry = tonumber(redis.call('ZSCORE', key, token))
  if not expiry then
    return false
  end
  redis.call('ZREM', key, token)
  return expiry > now_ms()
end
