-- audit.lua: the bucket's counters next to the same figures recounted from
-- its order records (read only; O(orders), so for audits, not hot paths).
--
-- KEYS     the bucket's three keys (records.lua)
--
-- Reply, an array of integers: {total, available, held, sold, held
-- recounted, sold recounted, buyers whose count differs from their orders,
-- outbox entries waiting, n, k, limit}; or {-7} when there is no such item.
local R = records()
local f = {}
local orders, counted = {}, {}
local all = redis.call('HGETALL', KEYS[1])
if #all == 0 then
  return {-7}
end
for i = 1, #all, 2 do
  local name, v = all[i], all[i + 1]
  local kind, id = string.sub(name, 1, 2), string.sub(name, 3)
  if kind == 'o:' then
    orders[#orders + 1] = R.decode(v)
  elseif kind == 'b:' then
    counted[id] = tonumber(v)
  elseif kind ~= 'a:' then
    f[name] = tonumber(v)
  end
end
local self = f.k
local held, sold, units = 0, 0, {}
for _, r in ipairs(orders) do
  if r.stock == self and r.st == R.HELD then
    held = held + r.q
  elseif r.stock == self and r.st == R.SOLD then
    sold = sold + r.q
  end
  if r.home == self and r.st ~= R.RETURNED then
    units[r.buyer] = (units[r.buyer] or 0) + r.q
  end
end
local mismatches = 0
if f.limit > 0 then
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
local outbox = redis.call('LLEN', KEYS[3]) - 1
return {f.total, f.available, f.held, f.sold, held, sold, mismatches, outbox, f.n, self, f.limit}
