-- penalty.lua: count a hit in a penalty box, and ban the key for a while
-- once its hits in one window pass the threshold; or only look.
--
-- KEYS[1]  hit count: a string "<hits>:<token>" (the token of the hit that
--          wrote it; a bare "<hits>" from an earlier version reads the
--          same), created by the window's first hit and expiring a window
--          later
-- KEYS[2]  ban: a string holding the token of the hit that started it
--          (an earlier version's '1' reads the same), which exists while
--          the key is banned and expires when the ban ends
-- ARGV[1]  '1' to count a hit, '0' to only look
-- ARGV[2]  threshold: hits admitted in one window; the next one starts a ban
-- ARGV[3]  window in milliseconds
-- ARGV[4]  ban in milliseconds
-- ARGV[5]  '1' if a hit during a ban starts it again at full length, else '0'
-- ARGV[6]  a token unique to this hit (random, made by the caller); '' when
--          only looking
--
-- Reply: three integers: 1 banned, 0 not; milliseconds of ban left (0 when
-- not banned); hits counted in the current window after the call (the hit
-- that starts a ban reports threshold + 1; hits during a ban are not
-- counted and report 0).
--
-- Why one script: reading the count, comparing it with the threshold and
-- banning are one step, so a crowd of simultaneous hits admits exactly
-- threshold of them. Every key is written with its TTL in the same command
-- (SET ... PX, never INCR then EXPIRE), and a key found without a TTL
-- (re-created by someone else's INCR or SET) is given one back, even when
-- only looking: no key can ban anyone forever.
--
-- Why the token: go-redis sends a script again when its reply is lost, so
-- one hit can run here twice. Each key keeps the token of the hit that
-- last wrote it, in the value it is written with anyway, so a second run
-- finds its own token and answers as the first run did instead of counting
-- the hit again (which, at the threshold, started a whole ban). A hit by
-- anyone else in between hides the token: the second run then counts, as
-- before.
local hit = ARGV[1] == '1'
local threshold, window, ban = tonumber(ARGV[2]), ARGV[3], ARGV[4]
local extend = ARGV[5] == '1'
local token = ARGV[6]

local left = redis.call('PTTL', KEYS[2])
if left == -1 then
  redis.call('PEXPIRE', KEYS[2], ban)
  left = tonumber(ban)
end
if left > 0 then
  if hit then
    -- Read only by hits that meet a ban: the rerun of the hit that
    -- started it reports, as that hit did, that it did.
    if redis.call('GET', KEYS[2]) == token then
      return {1, left, threshold + 1}
    end
    if extend then
      redis.call('PEXPIRE', KEYS[2], ban)
      left = tonumber(ban)
    end
  end
  return {1, left, 0}
end

-- A count in the last millisecond of its window has a PTTL of 0: its
-- window is over, and its hits must not carry into the next one (the SET
-- below would give them a whole new window).
local ttl = redis.call('PTTL', KEYS[1])
local hits = 0
if ttl == -1 or ttl > 0 then
  local v = redis.call('GET', KEYS[1]) or ''
  local n, last = string.match(v, '^(%d+):(.*)$')
  hits = tonumber(n or v) or 0
  if ttl == -1 then
    redis.call('PEXPIRE', KEYS[1], window)
  end
  if hit and last == token then
    return {0, 0, hits}
  end
end
if not hit then
  return {0, 0, hits}
end

hits = hits + 1
if hits > threshold then
  -- The count starts again from zero after the ban.
  redis.call('SET', KEYS[2], token, 'PX', ban)
  redis.call('DEL', KEYS[1])
  return {1, tonumber(ban), hits}
end
-- The count and its TTL in one command: what is left of the window, or a
-- whole one for a new count. (INCR would keep the TTL on a real Redis, whose
-- clock stands still while a script runs; on a server whose clock moves,
-- as miniredis's can, the key could expire after the PTTL above and INCR
-- re-create it without one.)
redis.call('SET', KEYS[1], string.format('%d', hits) .. ':' .. token, 'PX', ttl > 0 and ttl or window)
return {0, 0, hits}
