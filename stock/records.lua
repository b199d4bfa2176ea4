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
--                   buyer, 0 = none), exp (expiry, ms); ret (how many times
--                   units came back: give_back and restock.lua bump it, so
--                   a caller that saw the bucket refuse knows whether it
--                   may have units again); c and tc (the id and total of
--                   the Create call that made the bucket: create.lua);
--                   "o:<order id>" -> order record (see below);
--                   "b:<buyer>" -> units held, sold or claimed by the
--                   buyer's orders homed here (only with a limit);
--                   "a:<order id>" -> for a hold a Reserve walk made here
--                   for a claim homed elsewhere: "c" and that walk's
--                   token, or "t" and the token of the last walk that
--                   found the hold and took it over (overlapping
--                   attempts); only its maker gives a hold back, and
--                   only one not taken over (take.lua, cancel.lua). It
--                   goes when the hold ends (give_back, confirm.lua, and
--                   cancel.lua's give-back, which forgets the order).
--   KEYS[2] due     zset: the deadline in ms (Redis TIME) of each hold whose
--                   units are here and of each claim homed here, scored by
--                   it. A member is the order id, or the ids of one batch's
--                   orders with one deadline joined by NUL (no order id
--                   holds one): a ZADD costs Redis a microsecond a member
--                   in a large zset. Confirm, Cancel and settling a claim
--                   elsewhere remove an order's own member (ZREM of its
--                   id), but cannot take an id out of a batch's: that
--                   stays until due, and the sweep then drops an id whose
--                   record no longer ends here.
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
    redis.call('HINCRBY', KEYS[1], 'ret', 1)
    redis.call('HINCRBY', KEYS[1], 'held', -r.q)
    r.st = R.RETURNED
    redis.call('HSET', KEYS[1], 'o:' .. order, R.encode(r))
    redis.call('ZREM', KEYS[2], order)
    if r.home == self then
      R.release_buyer(limit, r.buyer, r.q)
    else
      redis.call('RPUSH', KEYS[3], order .. '|' .. r.home .. '|' .. R.RETURNED .. '|' .. self)
      redis.call('HDEL', KEYS[1], 'a:' .. order) -- the hold's maker mark (take.lua)
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

  -- sweep ends at most max holds and claims whose deadline has passed,
  -- looking at no more than 4 * max order ids due: held units go back to
  -- stock, claims release the buyer's allowance, and an id whose record
  -- has moved on (sold, returned, held elsewhere, or a newer hold or claim
  -- of a reused id, with a later deadline and a member of its own) is
  -- dropped. Such ids are left by Confirm, Cancel and settle, and cost a
  -- read each, hence the wider bound on looking. It returns the units put
  -- back, the claims ended, and whether it stopped at a bound (more may be
  -- due).
  function R.sweep(now, max, self, limit)
    local units, claims, ended, seen, look = 0, 0, 0, 0, 4 * max
    local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'WITHSCORES', 'LIMIT', 0, look)
    -- done: the members looked at; rest: what is left of the last one, if
    -- the bounds cut it; kept: live orders of this bucket not due yet,
    -- whose ids are indexed again by their own deadline (see below).
    local done, rest, kept = {}, nil, {}
    for i = 1, #due, 2 do
      local member = due[i]
      local ids = {}
      for id in string.gmatch(member, '[^%z]+') do
        ids[#ids + 1] = id
      end
      local j = 0
      while j < #ids and seen < look and ended < max do
        j, seen = j + 1, seen + 1
        local r = R.record(ids[j])
        if r and (r.st == R.HELD and r.stock == self or r.st == R.CLAIMED and r.home == self) then
          if r.deadline <= now then
            if r.st == R.HELD then
              R.give_back(ids[j], r, self, limit)
              units, ended = units + r.q, ended + 1
            else
              R.end_claim(ids[j], r, limit)
              claims, ended = claims + 1, ended + 1
            end
          else
            -- A newer hold or claim of a reused id has a member of its
            -- own; indexing it again costs nothing if so, and keeps it
            -- swept if its member was lost.
            kept[#kept + 1] = r.deadline
            kept[#kept + 1] = ids[j]
          end
        end
      end
      if j > 0 then
        done[#done + 1] = member
      end
      if j < #ids then
        if j > 0 then
          rest = {due[i + 1], table.concat(ids, '\0', j + 1)}
        end
        break
      end
    end
    -- unpack() stops short of 8,000 values, and max is the caller's.
    for i = 1, #done, 1000 do
      redis.call('ZREM', KEYS[2], unpack(done, i, math.min(i + 999, #done)))
    end
    if rest then
      -- NX: the rest may be one id whose reuse has a member of that very
      -- name, with a later deadline; that member must keep its score.
      redis.call('ZADD', KEYS[2], 'NX', rest[1], rest[2])
    end
    for i = 1, #kept, 2000 do
      redis.call('ZADD', KEYS[2], unpack(kept, i, math.min(i + 1999, #kept)))
    end
    return units, claims, seen >= look or ended >= max
  end
  return R
end
