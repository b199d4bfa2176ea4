-- common.lua is prepended to every bloom script. A shard's meta hash
-- (KEYS[1]) holds the filter's parameter string ("params"), how many
-- layers the shard has ("layers") and, for a scalable filter, how many
-- items its last layer counted ("count"). Every script checks the caller's
-- parameter string (ARGV[1]) against the stored one before it touches a
-- bit, so two programs that disagree on the parameters get an error, never
-- bits at positions the other cannot read.

-- meta returns the shard's layers and count, or nil if its stored
-- parameters differ from ARGV[1]. An absent shard counts as one empty
-- layer; create writes it (with a count when scalable) so that it exists
-- from the first Add.
local function meta(create, scalable)
  local m = redis.call('HMGET', KEYS[1], 'params', 'layers', 'count')
  if not m[1] then
    if create then
      if scalable then
        redis.call('HSET', KEYS[1], 'params', ARGV[1], 'layers', 1, 'count', 0)
      else
        redis.call('HSET', KEYS[1], 'params', ARGV[1], 'layers', 1)
      end
    end
    return 1, 0
  end
  if m[1] ~= ARGV[1] then
    return nil
  end
  return tonumber(m[2]), tonumber(m[3]) or 0
end

-- shard runs meta and checks ARGV[2], the number of layers the caller
-- knows of (and sent keys, and perhaps positions, for). It returns the
-- shard's layers and count, or nil and the reply that ends the script:
-- {1} if the stored parameters differ, {2, layers} if the shard has more
-- layers than the caller knows.
local function shard(create, scalable)
  local layers, count = meta(create, scalable)
  if not layers then
    return nil, {1}
  end
  if layers > tonumber(ARGV[2]) then
    return nil, {2, layers}
  end
  return layers, count
end

-- geometry reads the k of each of the sent layers, ARGV[at + j], and
-- returns them with where each layer's positions start within an item's
-- (base) and how many positions an item has in all (stride): item i's
-- positions in layer j are at base[j] .. base[j] + k[j] - 1 from its first.
local function geometry(sent, at)
  local k, base, stride = {}, {}, 0
  for j = 1, sent do
    k[j] = tonumber(ARGV[at + j])
    base[j] = stride
    stride = stride + k[j]
  end
  return k, base, stride
end
