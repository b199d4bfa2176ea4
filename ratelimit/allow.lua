-- allow.lua: decide one request against one or more limits, all or
-- nothing: the request is admitted only if every limit admits it, and a
-- request some limit refuses consumes nothing from any of them. Arguments
-- and reply: common.lua. Sets of GCRA limits only and single fixed
-- windows go through gcra_all.lua and fixed_one.lua instead, which skip
-- this loop's bookkeeping.
--
-- The loop decides each limit and keeps nine values per limit in d, from
-- d[b+1]: admitted; remaining and reset after, before taking the cost and
-- after; retry after; and what taking the cost needs (three values). One
-- table, not one per value: allocating on every call costs microseconds.
local n = #KEYS
local d = {}
local all = true
for i = 1, n do
  local a = 3 + (i - 1) * 5
  local alg, key, b = ARGV[a + 1], KEYS[i], (i - 1) * 9
  local rate, period, burst, cost = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  if alg == 'g' then
    d[b + 1], d[b + 2], d[b + 3], d[b + 4], d[b + 5], d[b + 6], d[b + 7], d[b + 8] = gcra(key, rate, period, burst, cost)
  elseif alg == 'f' then
    d[b + 1], d[b + 2], d[b + 3], d[b + 4], d[b + 5], d[b + 6], d[b + 7] = fixed(key, rate, period, cost)
  elseif alg == 'l' then
    d[b + 1], d[b + 2], d[b + 3], d[b + 4], d[b + 5], d[b + 6] = sliding_log(key, rate, period, cost)
  else
    d[b + 1], d[b + 2], d[b + 3], d[b + 4], d[b + 5], d[b + 6], d[b + 7], d[b + 8], d[b + 9] = sliding_window(key, rate, period, cost)
  end
  all = all and d[b + 1]
end

-- Take the cost from every limit, or from none: a fixed window that was
-- incremented above is taken back.
local take = consume and all
local reply = {}
for i = 1, n do
  local a = 3 + (i - 1) * 5
  local alg, key, b = ARGV[a + 1], KEYS[i], (i - 1) * 9
  local period, cost = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 5])
  if alg == 'f' then
    if consume and not take then
      fixed_undo(key, cost, d[b + 7])
    end
  elseif take then
    if alg == 'g' then
      redis.call('SET', key, d[b + 7], 'PX', d[b + 8])
    elseif alg == 'l' then
      sliding_log_take(key, period, cost, ARGV[3])
    else
      sliding_window_take(key, period, d[b + 7], d[b + 8], d[b + 9])
    end
  end
  local rem, reset = d[b + 2], d[b + 4]
  if take then
    rem, reset = d[b + 3], d[b + 5]
  end
  reply[4 * i - 3] = d[b + 1] and 1 or 0
  reply[4 * i - 2] = rem
  reply[4 * i - 1] = d[b + 6]
  reply[4 * i] = reset
end
return reply
