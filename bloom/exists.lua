-- exists.lua reports which items may be in one shard of a Bloom filter:
-- an item is there if all its bits are set in any layer. Read-only.
--
-- KEYS[1]      the shard's meta hash (see common.lua)
-- KEYS[1+j]    the bitmap of layer j, j = 1..L
-- ARGV[1]      the filter's parameter string
-- ARGV[2]      L, the number of layers the caller sent positions for
-- ARGV[2+j]    k_j, layer j's number of bit positions per item
-- ARGV[3+L]    n, the number of items
-- ARGV[4+L..]  per item, per layer j, its k_j bit positions
--
-- Reply, integers:
--   {0, layers, found_1, ..., found_n}
--   {1}            stored parameters differ
--   {2, layers}    the shard has more layers than L

local sent = tonumber(ARGV[2])
local layers, stop = shard(false, false)
if not layers then
  return stop -- the reply that ends the script (see shard)
end
local k, base, stride = geometry(sent, 2)
local n = tonumber(ARGV[3 + sent])
local first = 4 + sent

local reply = {0, layers}
for i = 0, n - 1 do
  local at = first + i * stride
  local found = 0
  for j = 1, layers do
    -- Stop at the first clear bit: an absent item costs about two reads.
    local key, all = KEYS[1 + j], true
    for p = at + base[j], at + base[j] + k[j] - 1 do
      if redis.call('GETBIT', key, ARGV[p]) == 0 then
        all = false
        break
      end
    end
    if all then
      found = 1
      break
    end
  end
  reply[#reply + 1] = found
end
return reply
