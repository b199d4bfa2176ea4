-- dead.lua: list the newest dead jobs.
--
-- KEYS     the queue's keys (common.lua)
-- ARGV[1]  how many at most
--
-- Reply: five per job, newest first: id, died (ms), payload, attempts,
-- last error.
local dead = redis.call('ZREVRANGE', KEYS[4], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
local reply = {}
for i = 1, #dead, 2 do
  local id = dead[i]
  local f = redis.call('HMGET', KEYS[5], 'p:' .. id, 'a:' .. id, 'e:' .. id)
  local at = #reply
  reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4], reply[at + 5] =
    id, tonumber(dead[i + 1]), f[1] or '', tonumber(f[2] or '0'), f[3] or ''
end
return reply
