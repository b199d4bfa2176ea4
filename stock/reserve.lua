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
--   {1, deadline, bucket, swept}  reserved: the units are held in this bucket
--                                 until deadline (ms, Redis clock): the hold's
--                                 end, or the item's expiry if that is
--                                 sooner (a hold never outlives its keys)
--   {2, deadline, bucket, state}  the order was reserved before; nothing
--                                 changed (state 1 held, 2 sold, 3 returned:
--                                 a hold here past its deadline is
--                                 returned, swept or not; of a hold in
--                                 another bucket, the home's record may be
--                                 behind)
--   {-1, 0, 0, swept}             not enough stock, and no other bucket
--   {-2, units, 0, swept}         over the per-buyer limit (units: the
--                                 buyer's current count)
--                                 (swept, here and above: 1 if the
--                                 batch's sweeps put units back to stock)
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
--   {-5, deadline, 0, swept}      not enough stock here: the units are
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
-- (with TIME) for one order or for sixty-four. The ZADD adds one member
-- per deadline, the batch's ids joined by NUL: in a zset of a sale's
-- hundred thousand holds each member costs Redis about a microsecond
-- (records.lua). It builds none of the records.lua helpers unless an
-- order is replayed or holds must be swept.
--
-- An order's record is checked first, so a retry of an order that got its
-- units is answered with them even when the item has sold out since.
local routed = ARGV[1]
local count = (#ARGV - 1) / 4

-- fields[7..] are the batch's order records and buyer counts: 'o:'..id at
-- 7+2i, 'b:'..buyer at 8+2i for order i (from 0). A lone order's HMGET
-- names its fields outright: unpack() and a table grown field by field
-- cost the most common call a few tenths of a microsecond.
local fields, s
if count == 1 then
  fields = {'n', 'k', 'limit', 'available', 'held', 'exp', 'o:' .. ARGV[2], 'b:' .. ARGV[3]}
  s = redis.call('HMGET', KEYS[1], 'n', 'k', 'limit', 'available', 'held', 'exp', fields[7], fields[8])
else
  fields = {'n', 'k', 'limit', 'available', 'held', 'exp'}
  for i = 0, count - 1 do
    fields[7 + 2 * i] = 'o:' .. ARGV[2 + 4 * i]
    fields[8 + 2 * i] = 'b:' .. ARGV[3 + 4 * i]
  end
  s = redis.call('HMGET', KEYS[1], unpack(fields))
end

local reply = {}
if not s[1] or s[1] ~= routed then
  for i = 1, 4 * count, 4 do
    if s[1] then
      reply[i], reply[i + 1] = -6, tonumber(s[1])
    else
      reply[i], reply[i + 1] = -7, 0
    end
    reply[i + 2], reply[i + 3] = 0, 0
  end
  return reply
end

local self, limit, exp = tonumber(s[2]), tonumber(s[3]), tonumber(s[6])
local available, held = tonumber(s[4]), tonumber(s[5])
-- One new order that fits, with nothing to sweep (a sweep comes only for
-- an order that does not fit): the common lone call, written straight
-- through, with none of the closures and tables below. It writes what
-- decide() and flush() would.
if count == 1 and not s[7] then
  local q = tonumber(ARGV[4])
  local used = tonumber(s[8]) or 0
  if available >= q and (limit == 0 or used + q <= limit) then
    local t = redis.call('TIME')
    local deadline = math.min(t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[5]), exp)
    local dl = string.format('%d', deadline)
    local rec = 'H|' .. ARGV[4] .. '|' .. s[2] .. '|' .. s[2] .. '|' .. dl .. '|' .. ARGV[3]
    -- Numbers go to Redis as text made here: Redis writes a Lua number
    -- out with printf's %.17g, 0.25 µs for a count of 13 digits against
    -- string.format's 0.13.
    local av, hd = string.format('%d', available - q), string.format('%d', held + q)
    if limit > 0 then
      redis.call('HSET', KEYS[1], 'available', av, 'held', hd, fields[7], rec, fields[8], string.format('%d', used + q))
    else
      redis.call('HSET', KEYS[1], 'available', av, 'held', hd, fields[7], rec)
    end
    redis.call('ZADD', KEYS[2], dl, ARGV[2])
    return {1, deadline, self, 0}
  end
end

-- The batch's view of a field is val[name] once an order of the batch
-- wrote it (two orders of one buyer share a field), else s[index], what
-- the HMGET read. Work done on Redis (a sweep, a claim ended) is written
-- first and read again after: see reload().
local val = {}

-- hset and due collect the batch's writes. A field written twice (two
-- orders of one buyer) appears twice; HSET keeps the last value. due[dl]
-- lists the ids of the orders held or claimed until dl, and dues the dl
-- in the order they came.
local hset, due, dues = {'available', 0, 'held', 0}, {}, {}
local function flush()
  if #hset > 4 then
    hset[2], hset[4] = string.format('%d', available), string.format('%d', held)
    redis.call('HSET', KEYS[1], unpack(hset))
    hset = {'available', 0, 'held', 0}
  end
  if #dues > 0 then
    local zadd = {}
    for i, dl in ipairs(dues) do
      zadd[2 * i - 1], zadd[2 * i] = dl, table.concat(due[dl], '\0')
    end
    redis.call('ZADD', KEYS[2], unpack(zadd))
    due, dues = {}, {}
  end
end
local function reload()
  s = redis.call('HMGET', KEYS[1], unpack(fields))
  available, held, val = tonumber(s[4]), tonumber(s[5]), {}
end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- A held order's record, "H|qty|stock|home|deadline|buyer", is
-- 'H|' .. qty .. mid .. deadline .. '|' .. buyer: stock and home are this
-- bucket (records.lua's encode(), written out).
local mid = '|' .. s[2] .. '|' .. s[2] .. '|'
-- deadlines and dls cache each hold's deadline, as a number and as text;
-- swept says whether a sweep here put units back.
local drained, deadlines, dls, swept = false, {}, {}, false

-- decide decides order i and writes its answer at reply[r..r+3].
local function decide(i, r)
  local a, f = 2 + 4 * i, 7 + 2 * i
  local order, buyer, qs = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  local ofield, bfield = fields[f], fields[f + 1]
  local q = tonumber(qs)
  local known = val[ofield] or s[f]
  if known then
    local R = records()
    local rec = R.decode(known)
    if rec.buyer ~= buyer or rec.q ~= q then
      reply[r], reply[r + 1] = -3, 0
    elseif rec.st == R.CLAIMED and rec.deadline > now then
      reply[r], reply[r + 1] = -4, rec.deadline
    elseif rec.st == R.CLAIMED then
      -- The claim ran out unsettled: any hold taken for it ended with it.
      -- Resuming would settle onto a returned hold, so end the claim here
      -- and answer as the sweep's ending would have.
      flush()
      R.end_claim(order, rec, limit)
      reload()
      reply[r], reply[r + 1], reply[r + 2], reply[r + 3] = 2, rec.deadline, rec.stock, R.STATE_CODE[R.RETURNED]
      return
    else
      -- A hold here past its deadline is as good as returned, swept or
      -- not (Confirm would return it): a retry is told so, not "held".
      -- Of a hold in another bucket this record may be behind (a Confirm
      -- or a sweep there tells the home later): the caller asks there.
      local st = rec.st
      if st == R.HELD and rec.stock == self and rec.deadline <= now then
        st = R.RETURNED
      end
      reply[r], reply[r + 1], reply[r + 2], reply[r + 3] = 2, rec.deadline, rec.stock, R.STATE_CODE[st]
      return
    end
    reply[r + 2], reply[r + 3] = 0, 0
    return
  end

  local used = tonumber(val[bfield] or s[f + 1]) or 0
  local rounds = 0
  while not drained and rounds < 4 and ((held > 0 and available < q) or (limit > 0 and used + q > limit)) do
    -- Holds that ran out count as held until swept, and claims that ran
    -- out (which held does not count) against their buyers. Sweep some
    -- here, up to 64 for one order (an order of many units may need many
    -- holds back), so their units and their buyers' allowances come back
    -- without waiting for Sweep.
    flush()
    local units, claims, more = records().sweep(now, 16, self, limit)
    swept = swept or units > 0
    if units + claims > 0 then
      reload()
      used = tonumber(val[bfield] or s[f + 1]) or 0
    end
    drained, rounds = not more, rounds + 1
  end
  reply[r + 2], reply[r + 3] = 0, 0
  if limit > 0 and used + q > limit then
    reply[r], reply[r + 1] = -2, used
    return
  end
  local hold = ARGV[a + 3]
  local deadline, dl = deadlines[hold], dls[hold]
  if not deadline then
    deadline = math.min(now + tonumber(hold), exp)
    dl = string.format('%d', deadline)
    deadlines[hold], dls[hold] = deadline, dl
  end
  local h = #hset
  if available >= q then
    available, held = available - q, held + q
    local rec = 'H|' .. qs .. mid .. dl .. '|' .. buyer
    val[ofield], hset[h + 1], hset[h + 2] = rec, ofield, rec
    reply[r], reply[r + 1], reply[r + 2] = 1, deadline, self
  elseif routed == '1' then
    reply[r], reply[r + 1] = -1, 0
    return
  else
    -- Claim the units against the buyer here, where the limit is kept,
    -- before another bucket hands them out. If the caller never settles
    -- the claim, it ends at the deadline like a hold.
    local rec = 'P|' .. qs .. '|-1|' .. s[2] .. '|' .. dl .. '|' .. buyer
    val[ofield], hset[h + 1], hset[h + 2] = rec, ofield, rec
    reply[r], reply[r + 1] = -5, deadline
  end
  if limit > 0 then
    h = h + 2
    val[bfield], hset[h + 1], hset[h + 2] = used + q, bfield, string.format('%d', used + q)
  end
  local ids = due[dl]
  if ids then
    ids[#ids + 1] = order
  else
    due[dl], dues[#dues + 1] = {order}, dl
  end
end

for i = 0, count - 1 do
  decide(i, 4 * i + 1)
end
flush()
-- A new answer's last integer (reserved, refused, limited or claimed)
-- says whether the batch's sweeps put units back: the caller's sold-out
-- cache must then forget what it knew.
if swept then
  for r = 1, 4 * count, 4 do
    if reply[r] == 1 or reply[r] == -1 or reply[r] == -2 or reply[r] == -5 then
      reply[r + 3] = 1
    end
  end
end
return reply
