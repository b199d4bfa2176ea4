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

-- busy answers an attempt on a lock (key) held by another owner (holder):
-- -2 minus the holder's lease left, after flagging the holder ("+") if
-- the caller will wait for its release message (flag == '1'). PTTL comes
-- before flagging: if the key is gone (a clock that moves during a
-- script, as miniredis's can), there is nothing to flag and the caller
-- retries at once. XX KEEPTTL can never create the key or drop its TTL.
local function busy(key, holder, flag)
  local pttl = redis.call('PTTL', key)
  if pttl == -2 then
    return -2
  end
  if flag == '1' and string.sub(holder, -1) ~= '+' then
    redis.call('SET', key, holder .. '+', 'XX', 'KEEPTTL')
  end
  return -pttl - 2
end
