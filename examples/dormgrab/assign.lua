-- assign.lua: puts a party (one student, or a group placed together) into
-- the first of the given dorms with room for it all, in one atomic step:
-- all its members get a bed there, or none gets one anywhere.
--
-- KEYS[1]  the batch's state hash:
--            beds:<dorm>    free beds
--            fence:<dorm>   the highest fencing token that assigned there
--            placed:<id>    the dorm a student has a bed in
-- KEYS[2]  the batch's assignment log (a list), kept for the audit
-- ARGV[1]  the log's TTL in ms (set when the log is created)
-- ARGV[2]  the fencing token of the dorm lock held, or 0 without a lock
--          (a lock guards one dorm: with a fence, give one dorm)
-- ARGV[3]  n, the number of dorms
-- ARGV[4 .. 3+n]  the dorms, best first
-- ARGV[4+n ..]    the party's members
--
-- Reply: {1, dorm} placed; {2, dorm} already placed there (the whole
-- party, by an earlier request: nothing changes); {-1, dorm} a member is
-- placed elsewhere (or the party only in part); {-2} no dorm has room;
-- {-3} the fence is older than one that already assigned to the dorm (the
-- lock was lost and taken by another): nothing changes; {-4, dorm} no such
-- dorm.
local state, fence, n = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local members = {}
for i = 4 + n, #ARGV do
  members[#members + 1] = ARGV[i]
end

-- Where the members are already: a party is placed whole or not at all.
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

for i = 4, 3 + n do
  local dorm = ARGV[i]
  local free = tonumber(redis.call('HGET', state, 'beds:' .. dorm) or '-1')
  if free < 0 then
    return {-4, dorm}
  end
  if free >= #members then
    -- A holder whose lease ran out while it was stalled must not write
    -- after the next holder did: the storage, not the lock, has the last
    -- word.
    if fence > 0 then
      if tonumber(redis.call('HGET', state, 'fence:' .. dorm) or '0') > fence then
        return {-3}
      end
      redis.call('HSET', state, 'fence:' .. dorm, fence)
    end
    redis.call('HINCRBY', state, 'beds:' .. dorm, -#members)
    for _, m in ipairs(members) do
      redis.call('HSET', state, 'placed:' .. m, dorm)
      if redis.call('RPUSH', KEYS[2], '+ ' .. m .. ' ' .. dorm .. ' ' .. fence) == 1 then
        redis.call('PEXPIRE', KEYS[2], ARGV[1])
      end
    end
    return {1, dorm}
  end
end
return {-2}
