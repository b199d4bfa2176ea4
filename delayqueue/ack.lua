-- ack.lua: deliveries' jobs are done: forget each job whose delivery
-- still holds it (its token is the job's current one). A Worker acks the
-- handlers that returned together with one call; Delivery.Ack sends one.
--
-- KEYS     the queue's keys (common.lua)
-- ARGV     pairs: job id, the delivery's lease token
--
-- Reply: one integer per pair, in order: 1 done; 0 the delivery no longer
-- held the job (its lease ran out and the job was requeued, claimed again
-- or buried).
local tokens = {}
for i = 1, #ARGV, 2 do
  tokens[#tokens + 1] = 't:' .. ARGV[i]
end
local held = redis.call('HMGET', KEYS[3], unpack(tokens))
local reply, done, fields, records = {}, {}, {}, {}
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  if held[(i + 1) / 2] == ARGV[i + 1] then
    done[#done + 1] = id
    fields[#fields + 1], fields[#fields + 2], fields[#fields + 3] = 'p:' .. id, 'a:' .. id, 't:' .. id
    -- The job leaves the in-flight set: the record of its claim goes too.
    local c = claim_field(ARGV[i + 1])
    if c and not records[c] then
      records[c] = true
      fields[#fields + 1] = c
    end
    reply[#reply + 1] = 1
  else
    reply[#reply + 1] = 0
  end
end
if #done > 0 then
  redis.call('ZREM', KEYS[2], unpack(done))
  redis.call('HDEL', KEYS[3], unpack(fields))
end
return reply
