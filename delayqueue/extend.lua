-- extend.lua: renew deliveries' leases, each if it still holds its job. A
-- batch Worker renews the deliveries of a batch with one call;
-- Delivery.Extend sends one.
--
-- KEYS     the queue's keys (common.lua)
-- ARGV[1]  the new lease, in ms from now
-- ARGV[2..] pairs: job id, the delivery's lease token
--
-- Reply: one integer per pair, in order: the new lease deadline in ms; 0
-- if the delivery no longer holds the job.
local deadline = now_ms() + tonumber(ARGV[1])
local reply = {}
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('HGET', KEYS[3], 't:' .. id) == ARGV[i + 1] then
    redis.call('ZADD', KEYS[2], 'XX', deadline, id)
    reply[#reply + 1] = deadline
  else
    reply[#reply + 1] = 0
  end
end
return reply
