-- records.lua: helpers shared by every stock script; scripts.go prepends
-- this file to each of them. It defines one function, records(), which
-- builds the helpers when a script first needs them: creating a dozen
-- closures on every call would cost the hot path of reserve.lua, which
-- needs none of them, several microseconds.
--
-- Every script runs on one bucket of one item and gets that bucket's keys,
-- in this order (all share the bucket's hash tag):
--   KEYS[1] bucket  hash: total, available, held, sold (units); n (buckets
--                   of the item), k (this bucket's index), limit (units per
--                   buyer, 0 = none), exp (expiry, ms);
--                   "o:<order id>" -> order record (see below);
--                   "b:<buyer>" -> units held, sold or claimed by the
--                   buyer's orders homed here (only with a limit)
--   KEYS[2] due     zset: order id -> deadline in ms (Redis TIME) of a hold
--                   whose units are here, or of a claim homed here
--   KEYS[3] outbox  list: "order|home|state|from" for changes to orders
--                   whose units are here (from is this bucket's index) but
--                   whose buyer is homed elsewhere, until the home bucket has
--                   applied them
-- Counters, orders and buyers share one hash so that a reservation reads
-- everything it decides on with one HMGET and writes it with one HSET:
-- on a busy server each redis.call costs microseconds.
--
-- All three keys are created together with the same expiry, the list and
-- the zset holding one empty placeholder each; no script creates a key
-- again, they only check that the hash exists.
--
-- An order record is "state|qty|stock|home|deadline|buyer", where state is
-- H (held), S (sold), R (returned) or P (claimed: the home has counted the
-- units against the buyer but no bucket holds them yet), stock is the
-- index of the bucket holding the units (-1 while claimed), home the index
-- of the buyer's home bucket, deadline the end of the hold or claim in ms.
-- The buyer comes last so it may contain '|'.

local R

local function records()
  if R then
    return R
  end
  R = {}
  R.HELD, R.SOLD, R.RETURNED, R.CLAIMED = 'H', 'S', 'R', 'P'
  R.STATE_CODE = {H = 1, S = 2, R = 3, P = 4}

  function R.decode(v)
    local st, q, sb, hb, dl, buyer = string.match(v, '^(%a)|(%d+)|(%-?%d+)|(%d+)|(%d+)|(.*)$')
    return {st = st, q = tonumber(q), stock = tonumber(sb), home = tonumber(hb),
            deadline = tonumber(dl), buyer = buyer}
  end

  function R.encode(r)
    return r.st .. '|' .. string.format('%d', r.q) .. '|' .. string.format('%d', r.stock) .. '|' ..
           string.format('%d', r.home) .. '|' .. string.format('%d', r.deadline) .. '|' .. r.buyer
  end

  function R.now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end

  -- check_bucket reads this bucket's settings and the fields named in ...
  -- with one HMGET. It returns the bucket's index, its per-buyer limit and
  -- the fields, or an error reply when the item does not exist (-7) or has
  -- another number of buckets than the caller routed with (-6, n): the caller
  -- then routes again.
  function R.check_bucket(n_expected, ...)
    local s = redis.call('HMGET', KEYS[1], 'n', 'k', 'limit', ...)
    if not s[1] then
      return nil, nil, nil, {-7}
    end
    local n = tonumber(s[1])
    if n ~= tonumber(n_expected) then
      return nil, nil, nil, {-6, n}
    end
    return tonumber(s[2]), tonumber(s[3]), {select(4, unpack(s))}
  end

  function R.record(order)
    local v = redis.call('HGET', KEYS[1], 'o:' .. order)
    return v and R.decode(v)
  end

  function R.release_buyer(limit, buyer, q)
    if limit > 0 then
      if redis.call('HINCRBY', KEYS[1], 'b:' .. buyer, -q) <= 0 then
        redis.call('HDEL', KEYS[1], 'b:' .. buyer)
      end
    end
  end

  -- give_back returns the units of a held order to this bucket (which must be
  -- its stock bucket) and marks it returned. The buyer's allowance is
  -- released here if this is also the home; otherwise the home is told
  -- through the outbox.
  function R.give_back(order, r, self, limit)
    redis.call('HINCRBY', KEYS[1], 'available', r.q)
    redis.call('HINCRBY', KEYS[1], 'held', -r.q)
    r.st = R.RETURNED
    redis.call('HSET', KEYS[1], 'o:' .. order, R.encode(r))
    redis.call('ZREM', KEYS[2], order)
    if r.home == self then
      R.release_buyer(limit, r.buyer, r.q)
    else
      redis.call('RPUSH', KEYS[3], order .. '|' .. r.home .. '|' .. R.RETURNED .. '|' .. self)
    end
  end

  -- end_claim ends a claim homed here whose deadline has passed: the order
  -- is returned (stock stays -1) and the buyer's allowance released. The
  -- record is kept, so that a retry of the order is answered "returned"
  -- rather than reserved afresh. A hold another bucket took for the claim
  -- shares its deadline and is returned there; the home no longer heeds
  -- that bucket's news (mirror.lua), so the allowance is released once.
  function R.end_claim(order, r, limit)
    r.st = R.RETURNED
    redis.call('HSET', KEYS[1], 'o:' .. order, R.encode(r))
    redis.call('ZREM', KEYS[2], order)
    R.release_buyer(limit, r.buyer, r.q)
  end

  -- sweep ends up to max holds and claims whose deadline has passed: held
  -- units go back to stock, claims release the buyer's allowance. It returns
  -- the units put back and the claims ended.
  function R.sweep(now, max, self, limit)
    local units, claims = 0, 0
    local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, max)
    for _, order in ipairs(due) do
      local r = R.record(order)
      if r and r.st == R.HELD and r.stock == self then
        R.give_back(order, r, self, limit)
        units = units + r.q
      elseif r and r.st == R.CLAIMED and r.home == self then
        R.end_claim(order, r, limit)
        claims = claims + 1
      else
        redis.call('ZREM', KEYS[2], order)
      end
    end
    return units, claims
  end
  return R
end
