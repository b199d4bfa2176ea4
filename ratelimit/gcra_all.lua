-- gcra_all.lua: decide one request against one or more GCRA limits, all
-- or nothing. Allow, AllowN, Peek and an AllowAll whose limits are all
-- GCRA come here; allow.lua (with gcra.lua) takes sets that mix
-- algorithms. The algorithm and the stored state are gcra.lua's; keep the
-- two in step (a test holds their answers equal).
--
-- KEYS     one key per limit, all in one hash slot
-- ARGV[1]  now in microseconds, or '' for Redis TIME (tests pin the clock)
-- ARGV[2]  '1' to take the request when every limit admits it, '0' to
--          only look
-- then three per limit, in units of 1/rate microseconds: rate, the
-- allowance (burst × period) and the request's cost (cost × period)
--
-- Reply: per limit, how far its theoretical arrival time lay beyond now
-- before this call, in the same units. That is the limit's whole state:
-- the Go side works out from it, with the arguments it sent, what the
-- script decided (a limit admits when ahead + cost <= allowance; the
-- request is taken when every limit admits and ARGV[2] is '1') and the
-- remaining, retry-after and reset-after times.
--
-- Why so little here: on a busy server the Lua arithmetic of those times
-- cost more than the commands (three limits: about 9 µs of 15), and Go
-- does it exactly in int64 for nothing. What stays is the decision, which
-- must be atomic, and writing the new state.
local keys, argv = KEYS, ARGV
local n = #keys
local t = tonumber(argv[1])
if not t then
  local now = redis.call('TIME')
  t = tonumber(now[1]) * 1000000 + tonumber(now[2])
end

local state
if n == 1 then
  state = {redis.call('GET', keys[1])}
else
  state = redis.call('MGET', unpack(keys))
end

-- state[i] becomes limit i's ahead (0 for a key that is gone, or whose
-- TAT is past).
local take = argv[2] == '1'
for i = 1, n do
  local ahead = 0
  local v = state[i]
  if v then
    local us, frac = string.match(v, '^(%d+):(%d+)$')
    us = tonumber(us)
    if us and us >= t then
      ahead = (us - t) * tonumber(argv[3 * i]) + tonumber(frac)
    end
  end
  state[i] = ahead
  if ahead + tonumber(argv[3 * i + 2]) > tonumber(argv[3 * i + 1]) then
    take = false
  end
end

-- Taking stores the new TAT as gcra.lua does: "us:frac", meaning
-- t + us + frac/rate microseconds, kept until it is past (plus a
-- millisecond, as PX rounds).
if take then
  local floor = math.floor
  for i = 1, n do
    local rate = tonumber(argv[3 * i])
    local after = state[i] + tonumber(argv[3 * i + 2])
    -- floor and ceil of after / rate, corrected for the rounding of the
    -- float division (all values stay below 2^53).
    local us = floor(after / rate)
    if us * rate > after then
      us = us - 1
    elseif (us + 1) * rate <= after then
      us = us + 1
    end
    local frac = after - us * rate
    local reset = us
    if frac > 0 then
      reset = us + 1
    end
    -- The TTL goes as text: Redis writes a Lua number out with %.17g,
    -- which costs twice string.format's %d.
    redis.call('SET', keys[i], string.format('%d:%d', t + us, frac), 'PX', string.format('%d', floor((reset + 999) / 1000) + 1))
  end
end
return state
