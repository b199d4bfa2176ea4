-- ticket.lua: a party's place in its batch's request queue. A party that
-- already waits keeps its ticket (a double click or a scripted burst takes
-- one place, not a hundred); otherwise it gets the next number.
--
-- KEYS[1]  the batch's state hash: seq (the last ticket given) and
--          pending:<party> (the ticket of its waiting request)
-- ARGV[1]  the party
--
-- Reply: {ticket, 1} a new ticket (enqueue its request), {ticket, 0} the
-- party's waiting one.
-- The hash carries the run's TTL from its setup: once it has expired the
-- batch is over, and writing would re-create it without one.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('batch closed')
end
local field = 'pending:' .. ARGV[1]
local t = redis.call('HGET', KEYS[1], field)
if t then
  return {tonumber(t), 0}
end
t = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('HSET', KEYS[1], field, t)
return {t, 1}
