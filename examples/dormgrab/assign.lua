-- assign.lua (after place.lua): place, for the preemptive mode.
--
-- KEYS[1]  the batch's state hash
-- KEYS[2]  the batch's assignment log
-- ARGV[1]  the log's TTL in ms
-- ARGV[2]  the fencing token of the dorm lock held, or 0 without a lock
-- ARGV[3]  n, the number of dorms
-- ARGV[4 .. 3+n]  the dorms, best first
-- ARGV[4+n ..]    the party's members
--
-- Reply: place's.
local n = tonumber(ARGV[3])
local dorms, members = {}, {}
for i = 4, 3 + n do
  dorms[#dorms + 1] = ARGV[i]
end
for i = 4 + n, #ARGV do
  members[#members + 1] = ARGV[i]
end
return place(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), dorms, members)
