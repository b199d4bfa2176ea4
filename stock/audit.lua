-- audit.lua: the bucket's counters next to the same figures recounted from
-- its order records (read only; O(orders), so for audits, not hot paths).
--
-- KEYS     the bucket's five keys (records.lua)
--
-- Reply, an array of integers: {total, available, held, sold, held
-- recounted, sold recounted, buyers whose count differs from their orders,
-- outbox entries waiting, n, k, limit}; or {-7} when there is no such item.
local s = redis.call('HMGET', KEYS[1], 'total', 'available', 'held', 'sold', 'n', 'k', 'limit')
if not s[1] then
  return {-7}
end
local self = tonumber(s[6])
local held, sold, units = 0, 0, {}
local orders = redis.call('HGETALL', KEYS[2])
for i = 1, #orders, 2 do
  if orders[i] ~= '' then
    local r = decode(orders[i + 1])
    if r.stock == self and r.st == HELD then
      held = held + r.q
    elseif r.stock == self and r.st == SOLD then
      sold = sold + r.q
    end
    if r.home == self and r.st ~= RETURNED then
      units[r.buyer] = (units[r.buyer] or 0) + r.q
    end
  end
end
local mismatches = 0
if tonumber(s[7]) > 0 then
  local counted = {}
  local buyers = redis.call('HGETALL', KEYS[3])
  for i = 1, #buyers, 2 do
    if buyers[i] ~= '' then
      counted[buyers[i]] = tonumber(buyers[i + 1])
    end
  end
  for b, u in pairs(units) do
    if counted[b] ~= u then
      mismatches = mismatches + 1
    end
    counted[b] = nil
  end
  for _, u in pairs(counted) do
    if u ~= 0 then
      mismatches = mismatches + 1
    end
  end
end
local outbox = redis.call('LLEN', KEYS[5]) - 1
return {tonumber(s[1]), tonumber(s[2]), tonumber(s[3]), tonumber(s[4]), held, sold,
  mismatches, outbox, tonumber(s[5]), self, tonumber(s[7])}
