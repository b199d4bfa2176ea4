-- calendar_read.lua: read months of one user's sign-in calendar
-- (calendar_mark.lua), for Streak.
--
-- KEYS     the months' keys, all in the user's hash tag
--
-- Reply: each month's string, or false (nil) for a month not stored; or
-- {0} when a month's key holds another type than a string.
--
-- MGET reads a key of another type as nil, like a missing one, where
-- Month and the marks get WRONGTYPE: the months read as nil are checked
-- with one EXISTS, in the same atomic step, so that a month a concurrent
-- SignIn creates in between is not taken for one of another type.
local got = redis.call('MGET', unpack(KEYS))
local absent = {}
for i = 1, #KEYS do
  if not got[i] then
    absent[#absent + 1] = KEYS[i]
  end
end
if #absent > 0 and redis.call('EXISTS', unpack(absent)) > 0 then
  return {0}
end
return got
