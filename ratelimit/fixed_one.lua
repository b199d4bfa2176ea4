-- fixed_one.lua: decide one request against one fixed-window limit
-- (arguments and reply: common.lua; the algorithm: fixed.lua). The
-- common case, without allow.lua's loop: two commands (INCRBY, PTTL) for
-- an admitted request.
local rate, period, cost = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[8])
local ok, rem0, rem1, reset0, reset1, retry, before = fixed(KEYS[1], rate, period, cost)
if not consume then
  return {ok and 1 or 0, rem0, retry, reset0}
end
if ok then
  return {1, rem1, 0, reset1}
end
fixed_undo(KEYS[1], cost, before)
return {0, rem0, retry, reset0}
