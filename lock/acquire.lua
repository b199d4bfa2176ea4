-- acquire.lua: take the lock if it is free and hand out a fencing token.
--
-- KEYS[1]  lock key: a string holding the owner token, followed by "+" once
--          a waiter has asked to be told when it is released
-- KEYS[2]  fence key: an integer counter, the last fencing token handed out
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  "1" if the caller will wait for a release message when the lock
--          is taken (then the holder is flagged with "+"), else "0"
-- ARGV[4]  how long the fence key is kept, in milliseconds
--
-- Reply: {1, fence} when obtained; {0, pttl} when another owner holds it
-- (pttl is the holder's remaining lease in milliseconds). A repeated call
-- with the same owner token is answered like the first.
--
-- SET NX PX creates the key and its expiry in one command: there is no
-- moment at which the lock exists without a TTL. With GET it also returns
-- the current holder's value when the key exists, which saves a read.

-- The fence must grow even after the fence key expired and is created
-- anew, so a new counter starts at Redis's clock in microseconds: every
-- earlier token was at most its own start plus one per acquisition, and no
-- lock is taken more than once per microsecond.
local function next_fence()
  local fence = redis.call('INCR', KEYS[2])
  if fence == 1 then
    local now = redis.call('TIME')
    fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
    redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', ARGV[4])
  end
  return fence
end

local holder = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
if not holder then
  return {1, next_fence()}
end
if holder == ARGV[1] or holder == ARGV[1] .. '+' then
  -- A retry of an attempt that succeeded but whose reply was lost. Only an
  -- acquisition moves the fence, so it still holds this owner's token.
  local fence = redis.call('GET', KEYS[2])
  if fence then
    return {1, tonumber(fence)}
  end
  return {1, next_fence()}
end
if ARGV[3] == '1' and string.sub(holder, -1) ~= '+' then
  redis.call('APPEND', KEYS[1], '+')
end
return {0, redis.call('PTTL', KEYS[1])}
