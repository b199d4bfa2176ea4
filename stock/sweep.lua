-- sweep.lua: return the units of holds whose deadline has passed and end
-- claims that were never settled, at most ARGV[1] of them, and list the
-- outbox: changes other home buckets still have to apply (mirror.lua).
-- Safe to run from many processes at once: each hold is returned once.
--
-- KEYS     the bucket's five keys (records.lua)
-- ARGV[1]  the most holds and claims to end, and outbox entries to list
-- ARGV[2]  the number of buckets the caller routed with
--
-- Reply: {units returned, claims ended, outbox entry...}, where an outbox
-- entry is the string "order|home|state"; or {-6, n} / {-7}.
local self, limit, _, err = check_bucket(ARGV[2])
if err then
  return err
end
local max = tonumber(ARGV[1])
local units, claims = sweep(now_ms(), max, self, limit)
local reply = {units, claims}
for _, e in ipairs(redis.call('LRANGE', KEYS[5], 0, max)) do
  if e ~= '' then
    reply[#reply + 1] = e
  end
end
return reply
