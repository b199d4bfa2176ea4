-- versioned_set.lua: compare-and-set of a versioned value. Writes the new
-- data only if the stored version is the one the caller expects, and stamps
-- the write with a new version taken from Redis's clock.
--
-- KEYS[1]  the value's hash: field data (the bytes), field ver (the
--          version), field w (the token of the call that wrote them),
--          field c (the token of the call that created the value)
-- ARGV[1]  expected version, microseconds part (0 with ARGV[2] 0: the value
--          must not exist)
-- ARGV[2]  expected version, sequence part (0..999)
-- ARGV[3]  the new data
-- ARGV[4]  time to live in milliseconds; 0 for none (an old expiry is
--          removed, as SET does)
-- ARGV[5]  now in microseconds, or '' for Redis TIME (tests pin the clock)
-- ARGV[6]  the call's token: random, never used by another call
--
-- Reply: {1, us, seq}: written; us and seq are the new version's parts.
--        Also when this is a resend whose first run wrote (the stored
--        token is ARGV[6]): us and seq are then the version that run
--        stamped. A write or delete by another call in between hides it:
--        {0, ...}.
--        {0, us, seq}: not written; the current version's parts ({0, 0, 0}:
--        the value does not exist).
--
-- A version is us*1000 + seq: us microseconds since the epoch, seq < 1000
-- telling apart writes in the same microsecond. us*1000 (about 1.8e18) is
-- past 2^53, where Lua's doubles stop being exact, so the script never forms
-- it: it keeps us and seq as two integers, stores ver as their digits side
-- by side (the decimal of us*1000 + seq), and splits the last three digits
-- off when it reads ver back. Go combines the parts into an int64.
local key = KEYS[1]
local us, seq, ver, bad, writer, dead, creator = current_version(key)
if bad then
  return bad
end
if dead and (writer == ARGV[6] or creator == ARGV[6]) then
  -- A resend whose first run wrote or created the value another call
  -- deleted since: writing again would undo the delete. Reported as a
  -- conflict, like a write in between.
  return {0, 0, 0}
end

if us ~= tonumber(ARGV[1]) or seq ~= tonumber(ARGV[2]) then
  -- go-redis sends a script again when its reply is lost. If the last
  -- write is this call's own, its first run wrote: report that write, or
  -- a caller who retries on a conflict would apply its change twice.
  if writer == ARGV[6] then
    return {1, us, seq}
  end
  return {0, us, seq}
end

local now = tonumber(ARGV[5])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The new version is max(now*1000, old + 1), in parts: a later clock starts
-- a new microsecond at sequence 0; the same or an earlier one (a second
-- write in one microsecond, a clock stepped back) counts on from the old
-- version, carrying into the next microsecond after 999. So versions only
-- grow, past a deleted value's too while its tombstone lasts.
if dead then
  us, seq = dead[1], dead[2]
end
if now > us then
  us, seq = now, 0
elseif seq < 999 then
  seq = seq + 1
else
  us, seq = us + 1, 0
end

if ver then
  redis.call('HSET', key, 'data', ARGV[3], 'ver', string.format('%d%03d', us, seq), 'w', ARGV[6])
else
  redis.call('HSET', key, 'data', ARGV[3], 'ver', string.format('%d%03d', us, seq), 'w', ARGV[6], 'c', ARGV[6])
end
if dead then
  redis.call('HDEL', key, 'dver')
end
-- ARGV[4] itself, not tonumber's result: Redis 7.2.0 to 7.2.4 handed a
-- command a Lua number such as 100000000 as "1e+08", which PEXPIRE
-- refuses (redis/redis#13113), after the HSET above had been made.
if tonumber(ARGV[4]) > 0 then
  redis.call('PEXPIRE', key, ARGV[4])
elseif ver or dead then
  redis.call('PERSIST', key)
end
return {1, us, seq}
