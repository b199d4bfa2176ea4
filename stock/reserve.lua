-- reserve.lua: reserve units for a batch of orders whose buyers have their
-- home on this bucket. Each order is decided in turn, exactly as if it had
-- been sent alone after the ones before it: replay a known order, check the
-- per-buyer limit, check the stock, deduct, and hold the units until a
-- deadline.
--
-- KEYS     the bucket's three keys (records.lua)
-- ARGV[1]  the number of buckets the caller routed with
-- then four arguments per order: order id, buyer, quantity (> 0), hold in
-- milliseconds (> 0)
--
-- Reply: four integers per order, in the orders' order, zero-padded:
--   {1, deadline, bucket}         reserved: the units are held in this bucket
--                                 until deadline (ms, Redis clock)
--   {2, deadline, bucket, state}  the order was reserved before; nothing
--                                 changed (state 1 held, 2 sold, 3 returned)
--   {-1}                          not enough stock, and no other bucket
--   {-2, units}                   over the per-buyer limit (units: the
--                                 buyer's current count)
--   {-3}                          the order id is taken by another buyer or
--                                 quantity
--   {-4, deadline}                the order's units are claimed here and no
--                                 bucket holds them yet (another call is
--                                 reserving it, or one failed mid-way): the
--                                 caller may resume with take.lua and
--                                 settle.lua until deadline. A claim found
--                                 past its deadline is ended instead (as the
--                                 sweep would) and the order replayed as
--                                 returned: {2, deadline, -1, 3}
--   {-5, deadline}                not enough stock here: the units are
--                                 claimed against the buyer until deadline;
--                                 take them from another bucket (take.lua)
--                                 and settle the claim here (settle.lua)
--   {-6, n} / {-7}                route again with n buckets / no such item
--                                 (every order gets it)
--
-- Why batches: concurrent Reserve calls on one bucket are sent together
-- (batch.go), and on a busy server each redis.call costs microseconds. The
-- script reads everything the whole batch decides on with one HMGET and,
-- on the common path, writes it with one HSET and one ZADD: four calls
-- (with TIME) for one order or for sixty-four. It builds none of the
-- records.lua helpers unless an order is replayed or holds must be swept.
--
-- An order's record is checked first, so a retry of an order that got its
-- units is answered with them even when the item has sold out since.
local routed = ARGV[1]
local count = (#ARGV - 1) / 4

-- fields[6..] are the batch's order records and buyer counts: 'o:'..id at
-- 6+2i, 'b:'..buyer at 7+2i for order i (from 0).
local fields = {'n', 'k', 'limit', 'available', 'held'}
for i = 0, count - 1 do
  fields[6 + 2 * i] = 'o:' .. ARGV[2 + 4 * i]
  fields[7 + 2 * i] = 'b:' .. ARGV[3 + 4 * i]
end
local s = redis.call('HMGET', KEYS[1], unpack(fields))

local reply = {}
local function answer(a, b, c, d)
  local at = #reply
  reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4] = a, b or 0, c or 0, d or 0
end
if not s[1] or s[1] ~= routed then
  for _ = 1, count do
    if s[1] then answer(-6, tonumber(s[1])) else answer(-7) end
  end
  return reply
end

local self, limit = tonumber(s[2]), tonumber(s[3])
local available, held
-- val is the batch's view of its fields (false: absent), kept current as
-- orders are decided. v holds available and held at 4-d and 5-d, and
-- fields[i] at i-d.
local val = {}
local function load(v, d)
  available, held = tonumber(v[4 - d]), tonumber(v[5 - d])
  for i = 6, #fields do
    val[fields[i]] = v[i - d]
  end
end
load(s, 0)

-- hset and zadd collect the batch's writes. A field written twice (two
-- orders of one buyer) appears twice; HSET keeps the last value.
local hset, zadd = {'available', 0, 'held', 0}, {}
local function set(f, v)
  val[f] = v
  hset[#hset + 1] = f
  hset[#hset + 1] = v
end
local function flush()
  if #hset > 4 then
    hset[2], hset[4] = available, held
    redis.call('HSET', KEYS[1], unpack(hset))
    hset = {'available', 0, 'held', 0}
  end
  if #zadd > 0 then
    redis.call('ZADD', KEYS[2], unpack(zadd))
    zadd = {}
  end
end

-- deadlines caches the deadline string of each hold in the batch.
local now, drained, deadlines = nil, nil, {}
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = t[1] * 1000 + math.floor(t[2] / 1000)
  end
  return now
end
local function decide(i)
  local order, buyer, qs = ARGV[2 + 4 * i], ARGV[3 + 4 * i], ARGV[4 + 4 * i]
  local ofield, bfield = fields[6 + 2 * i], fields[7 + 2 * i]
  local q = tonumber(qs)
  local known = val[ofield]
  if known then
    local R = records()
    local r = R.decode(known)
    if r.buyer ~= buyer or r.q ~= q then
      return answer(-3)
    end
    if r.st == R.CLAIMED then
      if r.deadline > clock() then
        return answer(-4, r.deadline)
      end
      -- The claim ran out unsettled: any hold taken for it ended with it.
      -- Resuming would settle onto a returned hold, so end the claim here
      -- and answer as the sweep's ending would have. The work is done on
      -- Redis, so the batch's view is written first and read again after.
      flush()
      R.end_claim(order, r, limit)
      load(redis.call('HMGET', KEYS[1], 'available', 'held', select(6, unpack(fields))), 3)
      return answer(2, r.deadline, r.stock, R.STATE_CODE[R.RETURNED])
    end
    return answer(2, r.deadline, r.stock, R.STATE_CODE[r.st])
  end

  clock()
  local used = tonumber(val[bfield]) or 0
  if not drained and held > 0 and (available < q or (limit > 0 and used + q > limit)) then
    -- Holds that ran out count as held until swept. Sweep a few here, so
    -- their units (and their buyers' allowances) come back without waiting
    -- for Sweep. The sweep works on Redis, so the batch's view is written
    -- first and read again after.
    flush()
    local units, claims = records().sweep(now, 16, self, limit)
    if units + claims > 0 then
      load(redis.call('HMGET', KEYS[1], 'available', 'held', select(6, unpack(fields))), 3)
      used = tonumber(val[bfield]) or 0
    else
      drained = true
    end
  end
  if limit > 0 and used + q > limit then
    return answer(-2, used)
  end

  local hold = ARGV[5 + 4 * i]
  local deadline = deadlines[hold]
  if not deadline then
    deadline = string.format('%d', now + tonumber(hold))
    deadlines[hold] = deadline
  end
  local state, stock = 'H', self
  if available >= q then
    available, held = available - q, held + q
  elseif routed == '1' then
    return answer(-1)
  else
    -- Claim the units against the buyer here, where the limit is kept,
    -- before another bucket hands them out. If the caller never settles the
    -- claim, it ends at the deadline like a hold.
    state, stock = 'P', -1
  end
  -- The record format is records.lua's encode(), written out here.
  set(ofield, state .. '|' .. qs .. '|' .. stock .. '|' .. s[2] .. '|' .. deadline .. '|' .. buyer)
  if limit > 0 then
    set(bfield, used + q)
  end
  zadd[#zadd + 1] = deadline
  zadd[#zadd + 1] = order
  if state == 'P' then
    return answer(-5, tonumber(deadline))
  end
  return answer(1, tonumber(deadline), self)
end

for i = 0, count - 1 do
  decide(i)
end
flush()
return reply
