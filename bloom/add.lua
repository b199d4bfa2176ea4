-- add.lua adds items to one shard of a Bloom filter, fixed or scalable,
-- and says which were new (set at least one bit that was 0).
--
-- KEYS[1]      the shard's meta hash (see common.lua)
-- KEYS[1+j]    the bitmap of layer j, j = 1..L
-- KEYS[2+L]    this call's own reply key (a random name on the shard's tag)
-- ARGV[1]      the filter's parameter string
-- ARGV[2]      L, the number of layers the caller sent positions for
-- ARGV[3]      1 if the filter is scalable (grows a layer when the last is full)
-- ARGV[4]      how long to keep the reply, in milliseconds
-- ARGV[4+j]    k_j, layer j's number of bit positions per item
-- ARGV[4+L+j]  layer j's capacity (items), for the scalable check
-- ARGV[5+2L]   n, the number of items
-- ARGV[6+2L..] per item, per layer j, its k_j bit positions
--
-- Reply, integers:
--   {0, layers, new_1, ..., new_n}  done
--   {1}                             stored parameters differ; nothing written
--   {2, layers}                     the shard has more layers than L; nothing written
--   {3, layers, new_1, ..., new_i}  items 1..i done, then the last layer was
--                                   full: send the rest with one more layer
--
-- go-redis sends a call again when its reply is lost, and the second run
-- finds the items present (or, if the shard grew in between, answers
-- {2}). So a reply with a new item is kept in KEYS[2+L], and a run that
-- adds nothing returns the reply kept there by an earlier run of the same
-- call, if any. A reply with no new item needs no keeping, since bits are
-- never cleared: each item it answered has all its bits in some layer,
-- which a second run finds (an older layer, or a full last one) or sets
-- again, so it answers 0 again and grows nothing; it stops with {3} at
-- the same item, or, if the shard changed, gives a reply as true as the
-- first. The caller sends a new KEYS[2+L] with every call, so the calls
-- it sends again on purpose (after {2} or {3}) are never answered from it.

local sent = tonumber(ARGV[2])
local scalable = ARGV[3] == '1'
local kept = KEYS[2 + sent]

-- replay returns the reply kept by an earlier run of this call, or reply
-- if there is none. It restarts the kept reply's expiry, for a further
-- resend should this reply be lost too. (GETEX would do both, but costs
-- more than GET on the common path: no reply kept.)
local function replay(reply)
  local v = redis.call('GET', kept)
  if not v then
    return reply
  end
  redis.call('PEXPIRE', kept, ARGV[4])
  local status, grown, flags = string.match(v, '^(%d+) (%d+) (%d*)$')
  local r = {tonumber(status), tonumber(grown)}
  for i = 1, #flags do
    r[2 + i] = string.byte(flags, i) - 48
  end
  return r
end

local fresh = false

-- finish keeps a reply with a new item, and looks up any other.
local function finish(reply)
  if not fresh then
    return replay(reply)
  end
  redis.call('SET', kept, reply[1] .. ' ' .. reply[2] .. ' ' .. table.concat(reply, '', 3), 'PX', ARGV[4])
  return reply
end

local layers, count = shard(true, scalable)
if not layers then
  if count[1] == 2 then
    return replay(count) -- the first run may have been before the growth
  end
  return count -- not a count: the reply that ends the script (see shard)
end
-- An item's positions are ARGV[at + base[j] .. at + base[j] + k[j] - 1].
local k, base, stride = geometry(sent, 4)
local n = tonumber(ARGV[5 + 2 * sent])
local first = 6 + 2 * sent

local function contains(j, at)
  local key = KEYS[1 + j]
  for p = at + base[j], at + base[j] + k[j] - 1 do
    if redis.call('GETBIT', key, ARGV[p]) == 0 then
      return false
    end
  end
  return true
end

local counted, grown = count, layers
local function save()
  if scalable and (count ~= counted or layers ~= grown) then
    redis.call('HSET', KEYS[1], 'layers', layers, 'count', count)
  end
end

local reply = {0, layers}
for i = 0, n - 1 do
  local at = first + i * stride
  local found = false
  for j = 1, layers - 1 do
    if contains(j, at) then
      found = true
      break
    end
  end
  -- A full last layer takes no more items: an item already in it is not
  -- new; any other goes to a new, larger layer with a tighter error.
  if not found and scalable and count >= tonumber(ARGV[4 + sent + layers]) then
    if contains(layers, at) then
      found = true
    elseif layers < sent then
      layers, count = layers + 1, 0
    else
      save()
      reply[1], reply[2] = 3, layers
      return finish(reply)
    end
  end
  local new = 0
  if not found then
    local key = KEYS[1 + layers]
    for p = at + base[layers], at + base[layers] + k[layers] - 1 do
      if redis.call('SETBIT', key, ARGV[p], 1) == 0 then
        new = 1
      end
    end
    count = count + new
    fresh = fresh or new == 1
  end
  reply[#reply + 1] = new
end
save()
reply[2] = layers
return finish(reply)
