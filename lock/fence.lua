-- fence.lua is prepended to the scripts that hand out a lock. The fence
-- key holds the last fencing token handed out for the lock: an integer
-- that expires an hour (3600000 ms) after it was created.

-- new_fence returns the next fencing token.
local function new_fence(key)
  local fence = redis.call('INCR', key)
  if fence == 1 then
    -- A new counter (the old one expired) starts at Redis's clock in
    -- microseconds, which is above every token handed out before: each
    -- was at most its counter's start plus one per acquisition, and no
    -- lock is taken more than once per microsecond. So fences keep
    -- growing without a key kept forever.
    local now = redis.call('TIME')
    fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
    redis.call('SET', key, string.format('%d', fence), 'PX', 3600000)
  end
  return fence
end

-- current_fence returns the token of the current holder (only a new
-- holder moves the fence), or a new one if the counter expired.
local function current_fence(key)
  return tonumber(redis.call('GET', key)) or new_fence(key)
end
