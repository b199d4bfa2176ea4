-- place.lua: the two steps that change who has a bed, as functions that
-- assign.lua, undo.lua and decide.lua share (each is this file followed by
-- its own). All of them act on one batch:
--
-- state  the batch's hash:
--          beds:<dorm>     free beds
--          fence:<dorm>    the highest fencing token that assigned there
--          placed:<id>     the dorm a student has a bed in
--          seq, pending:<party>, result:<party>   the queued mode's tickets
-- log    the batch's assignment log (a list), kept for the audit; ttl (ms)
--        is set when it is created
--
-- The state hash gets the run's TTL at setup and keeps it (it never
-- empties). place and leave write to it only after finding a dorm's beds
-- or a student's bed in it, so a hash that has expired is never re-created
-- without a TTL; the other scripts check that it exists.

local function logged(log, ttl, entry)
  if redis.call('RPUSH', log, entry) == 1 then
    redis.call('PEXPIRE', log, ttl)
  end
end

-- place puts a party (its members) into the first of dorms with room for
-- it all, in one step: all members get a bed there, or none gets one
-- anywhere. fence is the token of the dorm lock held (a lock guards one
-- dorm: with a fence, give one dorm), or 0 without a lock.
--
-- Returns {1, dorm} placed; {2, dorm} already placed there (the whole
-- party, by an earlier request: nothing changes); {-1, dorm} a member is
-- placed elsewhere (or the party only in part); {-2} no dorm has room; {-3}
-- the fence is older than one that already assigned to the dorm (the lock
-- was lost and taken by another): nothing changes; {-4, dorm} no such dorm.
local function place(state, log, ttl, fence, dorms, members)
  local at, here = nil, 0
  for _, m in ipairs(members) do
    local d = redis.call('HGET', state, 'placed:' .. m)
    if d then
      if at and d ~= at then
        return {-1, d}
      end
      at, here = d, here + 1
    end
  end
  if here == #members then
    return {2, at}
  elseif here > 0 then
    return {-1, at}
  end

  for _, dorm in ipairs(dorms) do
    local free = tonumber(redis.call('HGET', state, 'beds:' .. dorm) or '-1')
    if free < 0 then
      return {-4, dorm}
    end
    if free >= #members then
      -- A holder whose lease ran out while it was stalled must not write
      -- after the next holder did: the storage, not the lock, has the
      -- last word.
      if fence > 0 then
        if tonumber(redis.call('HGET', state, 'fence:' .. dorm) or '0') > fence then
          return {-3}
        end
        redis.call('HSET', state, 'fence:' .. dorm, fence)
      end
      redis.call('HINCRBY', state, 'beds:' .. dorm, -#members)
      for _, m in ipairs(members) do
        redis.call('HSET', state, 'placed:' .. m, dorm)
        logged(log, ttl, '+ ' .. m .. ' ' .. dorm .. ' ' .. fence)
      end
      return {1, dorm}
    end
  end
  return {-2}
end

-- leave takes a party out of its dorm and gives the beds back, exactly
-- once: a second call (a double click, a retried request) finds the party
-- unplaced. Returns the dorm it left, or false if it had no bed.
local function leave(state, log, ttl, members)
  local dorm = redis.call('HGET', state, 'placed:' .. members[1])
  if not dorm then
    return false
  end
  for _, m in ipairs(members) do
    if redis.call('HGET', state, 'placed:' .. m) == dorm then
      redis.call('HDEL', state, 'placed:' .. m)
      redis.call('HINCRBY', state, 'beds:' .. dorm, 1)
      logged(log, ttl, '- ' .. m .. ' ' .. dorm)
    end
  end
  return dorm
end
