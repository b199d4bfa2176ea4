-- fixed.lua: the fixed-window algorithm, for the decision scripts
-- (scripts.go puts it after common.lua). Returns as gcra.lua describes.
-- fixed_one.lua repeats this algorithm, inlined, for a single limit: a
-- change here goes there too (the tests run both).

-- The fixed window is a counter whose TTL is the window. When consuming,
-- it is incremented first (the caller takes a refused request back with
-- fixed_undo), which spares a read; a new key gets its TTL at once, and a
-- key found without one (lost to someone else's INCR) gets one here, so
-- no key can block forever. Returns, last, the count before this request.
--
-- Times are PTTL + 1 ms: Redis drops a key only once its expiry is past,
-- so at PTTL 0 the window is still there, and a client that waited
-- exactly PTTL would be refused again.
local function fixed(key, rate, period, cost)
  local window = idiv(period + 999, 1000)
  local count, pttl
  if consume then
    count = redis.call('INCRBY', key, cost) - cost
    if count == 0 then
      -- A window that starts now (fixed_undo leaves no 0 behind): it
      -- gets its TTL without a PTTL to ask.
      redis.call('PEXPIRE', key, window)
      pttl = window
    else
      pttl = redis.call('PTTL', key)
      if pttl < 0 then
        redis.call('PEXPIRE', key, window)
        pttl = window
      end
    end
  else
    count = tonumber(redis.call('GET', key) or '0')
    pttl = redis.call('PTTL', key)
    if pttl == -1 then
      redis.call('PEXPIRE', key, window)
    end
    if pttl < 0 then
      pttl = window
    end
  end
  local after = count + cost
  local retry = 0
  if after > rate then
    retry = (pttl + 1) * 1000
  end
  return after <= rate, max(0, rate - count), max(0, rate - after),
    count > 0 and (pttl + 1) * 1000 or 0, (pttl + 1) * 1000, retry, count
end

-- fixed_undo takes back the increment of a request that was refused.
local function fixed_undo(key, cost, before)
  if before == 0 then
    redis.call('DEL', key)
  else
    redis.call('DECRBY', key, cost)
  end
end
