-- calendar_mark.lua: change one day's mark in a user's month, if the mark
-- it has now is one the change may replace.
--
-- KEYS[1]  the month's calendar: 8 bytes of 2-bit fields, day d at bit
--          offset 2*(d-1), most significant bit first (the layout of
--          BITFIELD key GET u2 #(d-1)); then the token of the call that
--          made the last change and, as one digit, the mark it replaced.
--          A calendar written before the token was kept has only the
--          bytes of days up to its last marked one.
-- ARGV[1]  the day's field index, d-1 (0 to 30)
-- ARGV[2]  the new mark (0 to 3)
-- ARGV[3]  the marks it may replace, as a mask: bit m set (value 2^m)
--          allows replacing mark m
-- ARGV[4]  the key's expiry in ms since the epoch
-- ARGV[5]  the call's token: random, never used by another call
--
-- Reply: {previous mark, changed}: changed is 1 if the day now has the
-- new mark, 0 if it kept the previous one. A resend whose first run made
-- the change (the stored token is ARGV[5]) replies as that run did.
-- {-1, 0} when Redis's clock has passed the expiry: nothing is written.
--
-- Why a whole-string GET and SET, and arithmetic: miniredis has neither
-- BITFIELD nor Lua's bit library, and one byte holds the whole field (four
-- days a byte, fields never straddle two). One SET ... PXAT writes the
-- days, the token and the expiry at once.
local key = KEYS[1]
local field = tonumber(ARGV[1])
local new, mask = tonumber(ARGV[2]), tonumber(ARGV[3])
local token = ARGV[5]

-- The caller checked the expiry by its own clock, but PXAT is judged by
-- Redis's: from a clock behind it, a day at the edge of the retention
-- would be marked in a key Redis drops at once, and reported marked.
local t = redis.call('TIME')
if tonumber(ARGV[4]) <= t[1] * 1000 + math.floor(t[2] / 1000) then
  return {-1, 0}
end

local s = redis.call('GET', key) or ''
local at = math.floor(field / 4)
local unit = 2 ^ (6 - 2 * (field % 4)) -- the field's lowest bit's value
local byte = string.byte(s, at + 1) or 0
local old = math.floor(byte / unit) % 4

if math.floor(mask / 2 ^ old) % 2 ~= 1 then
  -- go-redis sends a script again when its reply is lost. If the last
  -- change is this call's own, its first run made it: say so, or a
  -- reward reported refused would never be given.
  if old == new and #s == 8 + #token + 1 and string.sub(s, 9, 8 + #token) == token then
    return {tonumber(string.sub(s, -1)), 1}
  end
  return {old, 0}
end
local days = string.sub(s, 1, 8)
days = days .. string.rep('\0', 8 - #days) -- unmarked days
redis.call('SET', key,
  string.sub(days, 1, at) .. string.char(byte + (new - old) * unit) .. string.sub(days, at + 2) ..
  token .. string.format('%d', old),
  'PXAT', ARGV[4])
return {old, 1}
