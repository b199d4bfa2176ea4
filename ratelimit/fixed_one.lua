-- fixed_one.lua: decide one request against one fixed-window limit, the
-- hot path of the most used limit. The algorithm is fixed.lua's, which
-- allow.lua runs for sets of limits; keep the two in step (a test holds
-- their answers equal). Like gcra_all.lua it leaves the arithmetic of the
-- result to Go and does here only what must be atomic.
--
-- KEYS[1]  the window's counter
-- ARGV[1]  '1' to count the request when admitted, '0' to only look
-- ARGV[2]  rate: requests admitted per window
-- ARGV[3]  the window in milliseconds
-- ARGV[4]  the request's cost
--
-- Reply: {count, pttl}. count is the window's count with this request
-- added when counting (the request was admitted if count <= rate, and
-- otherwise taken back here), the count as it stands when looking. pttl is
-- the window's PTTL, the whole window for a key that had no TTL.
--
-- Counting takes two commands for an admitted request: INCRBY counts it
-- first (sparing a read), then PEXPIRE gives a window that starts now its
-- TTL, or PTTL reads an open window's end; a key found without a TTL (one
-- that lost it) gets the whole window, so no key can block forever, even
-- when only looking.
local key, argv = KEYS[1], ARGV
if argv[1] == '1' then
  local count = redis.call('INCRBY', key, argv[4])
  local cost = tonumber(argv[4])
  local pttl
  if count == cost then
    -- A window that starts now: no PTTL to ask (see fixed.lua). The
    -- window goes as the text it came as: Redis would write a number out
    -- with %.17g.
    pttl = tonumber(argv[3])
    redis.call('PEXPIRE', key, argv[3])
  else
    pttl = redis.call('PTTL', key)
    if pttl < 0 then
      pttl = tonumber(argv[3])
      redis.call('PEXPIRE', key, argv[3])
    end
  end
  if count > tonumber(argv[2]) then
    if count == cost then
      redis.call('DEL', key)
    else
      redis.call('DECRBY', key, cost)
    end
  end
  return {count, pttl}
end

local count = tonumber(redis.call('GET', key) or '0')
local pttl = redis.call('PTTL', key)
if pttl == -1 then
  redis.call('PEXPIRE', key, argv[3])
end
if pttl < 0 then
  pttl = tonumber(argv[3])
end
return {count, pttl}
