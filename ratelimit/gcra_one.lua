-- gcra_one.lua: decide one request against one GCRA limit (arguments and
-- reply: common.lua; the algorithm: gcra.lua). The common case,
-- without allow.lua's loop: three commands (TIME, GET, SET).
local rate, period, burst, cost = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local ok, rem0, rem1, reset0, reset1, retry, tat, px = gcra(KEYS[1], rate, period, burst, cost)
if ok and consume then
  redis.call('SET', KEYS[1], tat, 'PX', px)
  return {1, rem1, 0, reset1}
end
return {ok and 1 or 0, rem0, retry, reset0}
