-- ack.lua: deliveries' jobs are done: forget each job whose delivery
-- still holds it (its token is the job's current one). A Worker acks the
-- handlers that returned together with one call; Delivery.Ack sends one.
--
-- KEYS     the queue's keys (common.lua)
-- ARGV     pairs: job id, the delivery's lease token
--
-- Reply: one integer per pair, in order: 1 done; 0 the delivery no longer
-- held the job, which the queue still has (waiting, in flight or dead:
-- its lease ran out and the job was requeued, claimed again or buried, or
-- this delivery retried, released or buried it); 2 the delivery no longer
-- held the job, and the queue no longer has it (acked, or cancelled after
-- a requeue). A resent ack finds its own first run's work as 2: only the
-- caller can tell that from a lost lease (Delivery.Ack).
local tokens = {}
for i = 1, #ARGV, 2 do
  tokens[#tokens + 1] = 't:' .. ARGV[i]
end
local held = redis.call('HMGET', KEYS[3], unpack(tokens))
local reply, done, dels, records = {}, {}, {}, {}
for i = 1, #ARGV, 2 do
  local id, tok = ARGV[i], ARGV[i + 1]
  if held[(i + 1) / 2] == tok then
    done[#done + 1] = id
    local d = #dels
    dels[d + 1], dels[d + 2], dels[d + 3] = 'p:' .. id, 'a:' .. id, 't:' .. id
    local c = claim_field(tok)
    if c and not records[c] then
      records[c] = true
      dels[#dels + 1] = c
    end
    reply[#reply + 1] = 1
  elseif redis.call('HEXISTS', KEYS[3], 'p:' .. id) == 0 and not redis.call('ZSCORE', KEYS[4], id) then
    -- Only a delivery that no longer holds its job pays for telling 2
    -- from 0 (reading the payloads in the HMGET would copy each one on
    -- every ack).
    reply[#reply + 1] = 2
  else
    reply[#reply + 1] = 0
  end
end
if #done > 0 then
  redis.call('ZREM', KEYS[2], unpack(done))
  redis.call('HDEL', KEYS[3], unpack(dels))
end
return reply
