-- create.lua writes a shard's parameters if it has none, and checks them
-- if it has.
--
-- KEYS[1]  the shard's meta hash (see common.lua)
-- ARGV[1]  the filter's parameter string
-- ARGV[2]  1 if the filter is scalable
--
-- Reply: {0, layers}, or {1} if the stored parameters differ.

local layers = meta(true, ARGV[2] == '1')
if not layers then
  return {1}
end
return {0, layers}
