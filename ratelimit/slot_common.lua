-- slot_common.lua: the start of the concurrency-limit scripts
-- (concurrency.go puts it before slot_acquire.lua, slot_extend.lua and
-- slot_release.lua). KEYS[1] is always the key's slots, a sorted set of
-- slot id -> lease deadline in milliseconds since the epoch; ARGV[1] is
-- now in milliseconds, or '' for Redis TIME (tests pin the clock).
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- expire_at_last makes the set live exactly as long as its latest lease:
-- never past its last lease, never dying before it. Every deadline left in
-- the set is after now, so the TTL is at least 1 ms.
local function expire_at_last()
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIRE', KEYS[1], string.format('%d', tonumber(last[2]) - now))
  end
end
