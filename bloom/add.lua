-- add.lua adds items to one shard of a Bloom filter, fixed or scalable,
-- and says which were new (set at least one bit that was 0).
--
-- KEYS[1]      the shard's meta hash (see common.lua)
-- KEYS[1+j]    the bitmap of layer j, j = 1..L
-- ARGV[1]      the filter's parameter string
-- ARGV[2]      L, the number of layers the caller sent positions for
-- ARGV[3]      1 if the filter is scalable (grows a layer when the last is full)
-- ARGV[3+j]    k_j, layer j's number of bit positions per item
-- ARGV[3+L+j]  layer j's capacity (items), for the scalable check
-- ARGV[4+2L]   n, the number of items
-- ARGV[5+2L..] per item, per layer j, its k_j bit positions
--
-- Reply, integers:
--   {0, layers, new_1, ..., new_n}  done
--   {1}                             stored parameters differ; nothing written
--   {2, layers}                     the shard has more layers than L; nothing written
--   {3, layers, new_1, ..., new_i}  items 1..i done, then the last layer was
--                                   full: send the rest with one more layer
--
-- A second run of a call (go-redis resends a command whose reply was
-- lost) finds the items the first added: in an older layer, or in the
-- last one with nothing left to set. It answers them not new, and grows
-- nothing for them. The caller knows when its command was written twice
-- (script.SendCount) and reports those answers as unknown; keeping each
-- reply in Redis for a resend to find would cost a key per call.

local sent = tonumber(ARGV[2])
local scalable = ARGV[3] == '1'

local layers, count = shard(true, scalable)
if not layers then
  return count -- not a count: the reply that ends the script (see shard)
end
-- An item's positions are ARGV[at + base[j] .. at + base[j] + k[j] - 1].
local k, base, stride = geometry(sent, 3)
local n = tonumber(ARGV[4 + 2 * sent])
local first = 5 + 2 * sent

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
  if not found and scalable and count >= tonumber(ARGV[3 + sent + layers]) then
    if contains(layers, at) then
      found = true
    elseif layers < sent then
      layers, count = layers + 1, 0
    else
      save()
      reply[1], reply[2] = 3, layers
      return reply
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
  end
  reply[#reply + 1] = new
end
save()
reply[2] = layers
return reply
