-- decide.lua (after place.lua): the queued mode's consumer decides a batch
-- of requests, in queue order, in one step. Each request's outcome is
-- recorded for the party's status page, the party's wait ends if the
-- request is still the one it waits on (a request delivered again after a
-- consumer crashed may be decided after the party queued a newer one,
-- whose ticket must stay), and the web servers are told ("<party>
-- <outcome>"), so that the pages waiting for it answer at once. Deciding a request again (a batch
-- delivered twice) changes no bed: its party is placed already, or has no
-- bed to give back.
--
-- KEYS[1]  the batch's state hash
-- KEYS[2]  the batch's assignment log
-- ARGV[1]  the log's TTL in ms
-- ARGV[2]  the batch's channel for decisions
-- ARGV[3..] the requests, each: kind ('grab' or 'undo'), party, ticket,
--          the number of dorms, the dorms (a pick by hand, or the wish
--          list at the click), the number of members, the members
--
-- Reply: the outcome of each request, in order: "placed <dorm>",
-- "already <dorm>", "refused", "undone <dorm>" or "nobed".
local state, log, ttl = KEYS[1], KEYS[2], ARGV[1]
if redis.call('EXISTS', state) == 0 then
  return redis.error_reply('batch closed') -- see ticket.lua
end
local outcomes = {}
local i = 3
while i <= #ARGV do
  local kind, party, ticket = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local nd = tonumber(ARGV[i + 3])
  local dorms = {}
  for j = i + 4, i + 3 + nd do
    dorms[#dorms + 1] = ARGV[j]
  end
  i = i + 4 + nd
  local nm = tonumber(ARGV[i])
  local members = {}
  for j = i + 1, i + nm do
    members[#members + 1] = ARGV[j]
  end
  i = i + 1 + nm

  local outcome
  if kind == 'undo' then
    local left = leave(state, log, ttl, members)
    outcome = left and ('undone ' .. left) or 'nobed'
  else
    local r = place(state, log, ttl, 0, dorms, members)
    if r[1] == 1 then
      outcome = 'placed ' .. r[2]
    elseif r[1] == 2 or r[1] == -1 then
      outcome = 'already ' .. r[2]
    else
      outcome = 'refused' -- no room (or, never from a checked request, no such dorm)
    end
  end
  outcomes[#outcomes + 1] = outcome
  redis.call('HSET', state, 'result:' .. party, outcome)
  local pending = 'pending:' .. party
  if redis.call('HGET', state, pending) == ticket then
    redis.call('HDEL', state, pending)
  end
  redis.call('PUBLISH', ARGV[2], party .. ' ' .. outcome)
end
return outcomes
