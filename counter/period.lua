-- period.lua: prepended to the scripts of windowed counts (scripts.go).
--
-- The caller names the key of the period its own clock is in, with that
-- period's bounds in ms. The Redis clock decides: outside() tells whether
-- it is in another period, and then the script touches nothing and replies
-- {-1, now}, and the caller names the period of that time and calls again.
-- So app servers whose clocks are off, by any amount, still count in the
-- period Redis is in, and a call carries one key per count.
--
-- clock_arg is the script's time argument: "" reads Redis TIME (once per
-- call); tests pin it to a time in ms. stop "0" means no window.
--
-- The answer for the last bounds asked about is kept: a batch's calls
-- mostly name one period, and comparing ARGV strings costs Lua a pointer
-- comparison (it interns short strings), against 90 ns a tonumber.
local clock_now
local last_start, last_stop, last_outside
local function outside(clock_arg, start, stop)
  if stop == '0' then
    return false
  end
  if start == last_start and stop == last_stop then
    return last_outside
  end
  if not clock_now then
    if clock_arg ~= '' then
      clock_now = tonumber(clock_arg)
    else
      local t = redis.call('TIME')
      clock_now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
  end
  last_start, last_stop = start, stop
  last_outside = clock_now < tonumber(start) or clock_now >= tonumber(stop)
  return last_outside
end
