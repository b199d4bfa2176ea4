-- undo.lua (after place.lua): leave, for the preemptive mode.
--
-- KEYS[1]  the batch's state hash
-- KEYS[2]  the batch's assignment log
-- ARGV[1]  the log's TTL in ms
-- ARGV[2..] the party's members
--
-- Reply: the dorm the party left, or false if it had no bed.
local members = {}
for i = 2, #ARGV do
  members[#members + 1] = ARGV[i]
end
return leave(KEYS[1], KEYS[2], ARGV[1], members)
