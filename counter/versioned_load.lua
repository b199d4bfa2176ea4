-- versioned_load.lua: read a versioned value's data and version.
--
-- KEYS[1]  the value's hash
--
-- Reply: {data, version}, both nil when the value does not exist, or is
-- a deleted value's tombstone (versioned_delete.lua).
--
-- A script rather than an HMGET: go-redis sends read-only commands to a
-- replica on a client with ReadOnly, RouteByLatency or RouteRandomly set,
-- and a version read from a replica that lags is one CompareAndSet, which
-- decides on the primary, refuses: a Load-then-CompareAndSet loop would
-- spin until the replica caught up. EVALSHA goes to the primary.
local got = redis.call('HMGET', KEYS[1], 'data', 'ver', 'dead')
if got[3] then
  return {false, false}
end
return {got[1], got[2]}
