-- take_batch.lua: Take calls, each counting n against each of several
-- capped counters, all or nothing: if any required count of a call would
-- go over its cap, nothing of that call is counted anywhere. Optional
-- counts are then made only where they fit. A lone call is a batch of
-- one; concurrent calls to one server are sent together (batch.go), and
-- each is decided in turn exactly as if it had been sent alone after the
-- ones before it, seeing the counts they left. (A cluster gets batches of
-- one only: a batch's keys span slots.)
--
-- KEYS     every call's keys, call after call, one per count: the key of
--          the period the caller's clock is in (prefix{key}:<period
--          label>), or the count's key without a window
-- ARGV[1]  the time in ms to decide by, or "" for Redis TIME
-- then per call: m, its number of counts, and six arguments per count:
--   n         what to add (> 0)
--   cap       the most the count may reach (>= 0)
--   optional  "1": count it only if it fits, and never refuse the call for
--             it; "0": required
--   start end the period's bounds in ms; "0" "0" without a window
--   expiry    the period key's expiry in ms since the epoch; without a
--             window, the TTL in ms from creation
--
-- Reply: per call, 1 + 2m integers: {allowed, then per count: value,
-- counted}, where allowed and counted are 1 or 0 and value is the count
-- after the call; or {-1, now, 0, ...} when the Redis clock is not in a
-- period the call named (period.lua), or {-2, 0, ...} when one of its
-- keys holds another type than a string, or a string that is not a
-- number: that call counted nothing, and the others are decided.
--
-- MGET reads a key of another type as nil, like a missing one, and SET
-- would replace it: a key read as nil is checked with EXISTS before it is
-- written (one call for the batch, and only when a key is new), as
-- take_one.lua's GET refuses it. A string that is not a number is not a
-- count either, and is refused the same way rather than overwritten:
-- another program's, or this package's own sketch of unique counts or
-- calendar month under a name a count also took ("{x}:u" with a daily
-- window names the day's sketch of "x").
--
-- A resend of this script (go-redis, after a lost reply) counts every
-- call again, within the caps: the count stays a plain decimal other
-- tools can GET, with no room for a call's token (doc.go, "Calls sent
-- twice").
--
-- Why periods in key names: the count of today cannot be reset by an
-- expiry at midnight. The caller computes the names (it knows the time
-- zone rules); the Redis clock checks them, so machines with skewed
-- clocks agree.
--
-- Writes: a new count is created with its expiry in one SET (PXAT for a
-- windowed count, PX for a TTL from creation). A count that exists is
-- moved with INCRBY n, and a windowed one's expiry set again with
-- PEXPIREAT, which gives back an expiry someone removed; a count without
-- a window keeps the TTL it was born with. On a busy server the pair
-- costs 0.54 µs against SET ... PXAT's 0.84 (with the string.format it
-- needs), and INCRBY alone 0.24 against SET ... XX KEEPTTL's 0.61. If
-- INCRBY's reply is not the value the script decided, the key had gone
-- by then (a server whose clock moves during a script, as miniredis's
-- can: a real Redis holds its clock still while a script runs) and INCRBY
-- made it afresh without a TTL, or it did not hold an integer: either
-- way SET writes the decided value with its expiry. A count of 0 is
-- always written with SET, as INCRBY's reply could not tell the two
-- apart.
--
-- Numbers: every argument a script hands Redis is a string (an ARGV, or
-- formatted with %d). Redis 7.2.0 to 7.2.4 printed a Lua number with
-- eight or more trailing zeros in exponent form (100000000 as "1e+08",
-- redis/redis#13113), which INCRBY and PEXPIREAT refuse and SET would
-- store; a test in internal/script reads every script for this.
--
-- Why batches: on a busy server a script call's fixed costs (reading and
-- parsing the command, setting up KEYS and ARGV, TIME, MGET, the reply)
-- are as large as one call's counting; a batch pays them once: Redis
-- spends about 5.5 µs executing a lone lottery draw (two counts) and 3.3
-- µs a draw in batches of sixteen (redis-benchmark, 2026-11-26; doc.go),
-- before the syscalls of each script call. For the same reason the common
-- calls (one count, or two of different keys) are decided without
-- building a table.

-- A lone call of two counts of different keys (a lottery draw: the day's
-- draws, the lifetime's wins) is decided straight through, before any of
-- the batch's tables and closures exist: on a busy server they and the
-- loop cost it a fifth of its time (6.4 against 5.3 µs a draw,
-- redis-benchmark, 2026-11-26). It answers and writes what the loop below
-- would; a test holds the two equal.
if #KEYS == 2 and #ARGV == 14 and KEYS[1] ~= KEYS[2] then
  local a = ARGV
  if outside(a[1], a[6], a[7]) or outside(a[1], a[12], a[13]) then
    return {-1, clock_now, 0, 0, 0}
  end
  local k1, k2 = KEYS[1], KEYS[2]
  local got = redis.call('MGET', k1, k2)
  if (not got[1] or not got[2]) and redis.call('EXISTS', k1, k2) > (got[1] and 1 or 0) + (got[2] and 1 or 0) then
    return {-2, 0, 0, 0, 0}
  end
  local was1, was2 = tonumber(got[1]), tonumber(got[2])
  if (got[1] and not was1) or (got[2] and not was2) then
    return {-2, 0, 0, 0, 0}
  end
  local v1, v2 = (was1 or 0) + tonumber(a[3]), (was2 or 0) + tonumber(a[9])
  local fits1, fits2 = v1 <= tonumber(a[4]), v2 <= tonumber(a[10])
  if (not fits1 and a[5] == '0') or (not fits2 and a[11] == '0') then
    return {0, was1 or 0, 0, was2 or 0, 0}
  end
  -- Each count that fits is written as write() below does.
  local c1, c2 = 0, 0
  if fits1 then
    if was1 and was1 ~= 0 and redis.pcall('INCRBY', k1, a[3]) == v1 then
      if a[7] ~= '0' then
        redis.call('PEXPIREAT', k1, a[8])
      end
    elseif a[7] ~= '0' then
      redis.call('SET', k1, string.format('%d', v1), 'PXAT', a[8])
    else
      redis.call('SET', k1, string.format('%d', v1), 'PX', a[8])
    end
    c1 = 1
  else
    v1 = was1 or 0
  end
  if fits2 then
    if was2 and was2 ~= 0 and redis.pcall('INCRBY', k2, a[9]) == v2 then
      if a[13] ~= '0' then
        redis.call('PEXPIREAT', k2, a[14])
      end
    elseif a[13] ~= '0' then
      redis.call('SET', k2, string.format('%d', v2), 'PXAT', a[14])
    else
      redis.call('SET', k2, string.format('%d', v2), 'PX', a[14])
    end
    c2 = 1
  else
    v2 = was2 or 0
  end
  return {1, v1, c1, v2, c2}
end

local got = redis.call('MGET', unpack(KEYS))
-- wrong_type[key] is true for a key of another type than a string (see
-- above); wrong_type is nil when there is none, as almost always.
local wrong_type
for i = 1, #KEYS do
  if not got[i] then
    local new = {}
    for j = i, #KEYS do
      if not got[j] then
        new[#new + 1] = KEYS[j]
      end
    end
    if redis.call('EXISTS', unpack(new)) > 0 then
      wrong_type = {}
      for _, key in ipairs(new) do
        if redis.call('EXISTS', key) == 1 then
          wrong_type[key] = true
        end
      end
    end
    break
  end
end
-- got[] now holds each key's count as a number, or false: a string that
-- is not a number is refused as another type is (see above).
for i = 1, #KEYS do
  local g = got[i]
  if g then
    local v = tonumber(g)
    if not v then
      wrong_type = wrong_type or {}
      wrong_type[KEYS[i]] = true
    end
    got[i] = v or false
  end
end
-- done[key] is a key's count as the calls so far left it, once one of
-- them wrote it; else got[] (read before any call) holds it.
local done = {}
-- num(s) is tonumber(s), remembered: the calls of a batch repeat their n
-- and cap, and tonumber (strtod) costs Redis 90 ns a time, a table read
-- 15.
local nums = {}
local function num(s)
  local v = nums[s]
  if not v then
    v = tonumber(s)
    nums[s] = v
  end
  return v
end
local reply, r = {}, 0
local a, k = 2, 0 -- a call's first argument (its m); its keys follow KEYS[k]

-- write stores v, the count of key (whose arguments start at ARGV[b]),
-- with its expiry (see above); existed: the count the key held, if any;
-- by: v - existed, as a string: ARGV[b] (a count's own n), or the n of
-- several counts of one key in one call, which are written once, formatted
-- (never a Lua number: see "Numbers" above).
local function write(key, existed, v, b, by)
  local windowed = ARGV[b + 4] ~= '0'
  if existed and existed ~= 0 and redis.pcall('INCRBY', key, by) == v then
    if windowed then
      redis.call('PEXPIREAT', key, ARGV[b + 5])
    end
  elseif windowed then
    redis.call('SET', key, string.format('%d', v), 'PXAT', ARGV[b + 5])
  else
    redis.call('SET', key, string.format('%d', v), 'PX', ARGV[b + 5])
  end
  done[key] = v
end

-- settle answers one count of an allowed call at reply[at], reply[at+1]:
-- counted and written if it fits (v), else left as it was (was).
local function settle(at, key, was, v, fits, b)
  if fits then
    write(key, was, v, b, ARGV[b])
    reply[at], reply[at + 1] = v, 1
  else
    reply[at], reply[at + 1] = was or 0, 0
  end
end

while a <= #ARGV do
  local m = tonumber(ARGV[a])
  local wrong_period = false
  for i = 1, m do
    local b = a + 6 * i - 5
    if outside(ARGV[1], ARGV[b + 3], ARGV[b + 4]) then
      wrong_period = true
      break
    end
  end
  local foreign = false
  if wrong_type then
    for i = 1, m do
      foreign = foreign or wrong_type[KEYS[k + i]] or false
    end
  end
  if wrong_period or foreign then
    reply[r + 1], reply[r + 2] = wrong_period and -1 or -2, wrong_period and clock_now or 0
    for j = 3, 1 + 2 * m do
      reply[r + j] = 0
    end
  elseif m == 1 or (m == 2 and KEYS[k + 1] ~= KEYS[k + 2]) then
    -- One count, or two of different keys (Incr, a lottery draw): the
    -- common calls, decided without a table.
    local b1, b2 = a + 1, a + 7
    local k1, k2 = KEYS[k + 1], KEYS[k + 2]
    local was1 = done[k1] or got[k + 1]
    local v1 = (was1 or 0) + num(ARGV[b1])
    local fits1 = v1 <= num(ARGV[b1 + 1])
    local was2, v2, fits2 = nil, 0, true
    if m == 2 then
      was2 = done[k2] or got[k + 2]
      v2 = (was2 or 0) + num(ARGV[b2])
      fits2 = v2 <= num(ARGV[b2 + 1])
    end
    if (not fits1 and ARGV[b1 + 2] == '0') or (not fits2 and ARGV[b2 + 2] == '0') then
      reply[r + 1], reply[r + 2], reply[r + 3] = 0, was1 or 0, 0
      if m == 2 then
        reply[r + 4], reply[r + 5] = was2 or 0, 0
      end
    else
      reply[r + 1] = 1
      settle(r + 2, k1, was1, v1, fits1, b1)
      if m == 2 then
        settle(r + 4, k2, was2, v2, fits2, b2)
      end
    end
  else
    -- Any other call. value[key] is the count as this call decided it so
    -- far, so that two counts of one key see each other.
    local value, counted = {}, {}
    local allowed = 1
    for pass = 1, 2 do
      -- Pass 1 decides the required counts, pass 2 the optional ones.
      local want = pass == 1 and '0' or '1'
      for i = 1, m do
        local b = a + 6 * i - 5
        if ARGV[b + 2] == want then
          local key = KEYS[k + i]
          local v = (value[key] or done[key] or got[k + i] or 0) + num(ARGV[b])
          if v <= num(ARGV[b + 1]) then
            value[key] = v
            counted[i] = true
          elseif pass == 1 then
            allowed = 0
            break
          end
        end
      end
      if allowed == 0 then
        break
      end
    end
    reply[r + 1] = allowed
    -- was[key]: the count before this call (write() moves done[key]).
    local was, written = {}, {}
    for i = 1, m do
      local key = KEYS[k + i]
      if was[key] == nil then
        was[key] = done[key] or got[k + i] or false
      end
    end
    for i = 1, m do
      local b, key = a + 6 * i - 5, KEYS[k + i]
      local before = was[key] or nil
      local v = value[key]
      if allowed == 0 or not v then
        v = before or 0
      elseif counted[i] and not written[key] then
        written[key] = true -- once per key, with its final value
        write(key, before, v, b, string.format('%d', v - (before or 0)))
      end
      reply[r + 2 * i], reply[r + 2 * i + 1] = v, (allowed == 1 and counted[i]) and 1 or 0
    end
  end
  r = r + 1 + 2 * m
  a = a + 1 + 6 * m
  k = k + m
end
return reply
