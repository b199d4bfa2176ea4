-- sweep.lua: return the units of holds whose deadline has passed and end
-- claims that were never settled, at most ARGV[1] of them, and list the
-- outbox: changes other home buckets still have to apply (mirror.lua).
-- Safe to run from many processes at once: each hold is returned once.
--
-- KEYS     the bucket's three keys (records.lua)
-- ARGV[1]  the most holds and claims to end, and outbox entries to list
-- ARGV[2]  the number of buckets the caller routed with
--
-- Reply: {units returned, claims ended, outbox entry...}, where an outbox
-- entry is the string "order|home|state|from"; or {-6, n} / {-7}.
local R = records()
local self, limit, _, err = R.check_bucket(ARGV[2])
if err then
  return err
end
local max = tonumber(ARGV[1])
local units, claims = R.sweep(R.now_ms(), max, self, limit)
local reply = {units, claims}
for _, e in ipairs(redis.call('LRANGE', KEYS[3], 0, max)) do
  if e ~= '' then
    reply[#reply + 1] = e
  end
end
return reply
