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
local fields = {}
for i = 1, #ARGV, 2 do
  fields[i], fields[i + 1] = 't:' .. ARGV[i], 'p:' .. ARGV[i]
end
-- The payloads ride along in the one HMGET the tokens need: they tell 2
-- from 0 without a command more.
local got = redis.call('HMGET', KEYS[3], unpack(fields))
local reply, done, dels, records = {}, {}, {}, {}
for i = 1, #ARGV, 2 do
  local id, tok = ARGV[i], ARGV[i + 1]
  if got[i] == tok then
    done[#done + 1] = id
    local d = #dels
    dels[d + 1], dels[d + 2], dels[d + 3] = 'p:' .. id, 'a:' .. id, 't:' .. id
    local c = claim_field(tok)
    if c and not records[c] then
      records[c] = true
      dels[#dels + 1] = c
    end
    reply[#reply + 1] = 1
  elseif not got[i + 1] and not redis.call('ZSCORE', KEYS[4], id) then
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
