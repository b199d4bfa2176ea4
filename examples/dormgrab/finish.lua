-- finish.lua: records the outcome of a party's queued request, ends its
-- wait if the request is still the one it waits on (a request delivered
-- again after a consumer crashed may finish after the party has queued a
-- newer one, whose ticket must stay), and tells the web servers, whose
-- status pages are waiting for it ("<party> <outcome>").
--
-- KEYS[1]  the batch's state hash: pending:<party> and result:<party>
-- ARGV[1]  the party
-- ARGV[2]  the request's ticket
-- ARGV[3]  the outcome, for the status page
-- ARGV[4]  the batch's channel for decisions
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('batch closed') -- see ticket.lua
end
local pending = 'pending:' .. ARGV[1]
redis.call('HSET', KEYS[1], 'result:' .. ARGV[1], ARGV[3])
if redis.call('HGET', KEYS[1], pending) == ARGV[2] then
  redis.call('HDEL', KEYS[1], pending)
end
redis.call('PUBLISH', ARGV[4], ARGV[1] .. ' ' .. ARGV[3])
return 1
