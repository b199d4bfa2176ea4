-- period.lua: prepended to the scripts of windowed counts (scripts.go).
--
-- A windowed count's caller sends the keys of three periods, the one its
-- own clock is in and both neighbours, with the current one's bounds;
-- period() picks one by the Redis clock, so that machines whose clocks
-- are a little off agree on the period.
--
-- clock_arg is the script's time argument: "" reads Redis TIME (once per
-- call); tests pin it to a time in ms.
local clock_now
local function period(clock_arg, start, stop)
  if stop == '0' then
    return 2 -- no window: the one key
  end
  if not clock_now then
    if clock_arg ~= '' then
      clock_now = tonumber(clock_arg)
    else
      local t = redis.call('TIME')
      clock_now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
  end
  if clock_now < tonumber(start) then
    return 1
  elseif clock_now >= tonumber(stop) then
    return 3
  end
  return 2
end
