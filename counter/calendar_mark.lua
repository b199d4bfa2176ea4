-- calendar_mark.lua: change one day's mark in a user's month, if the mark
-- it has now is one the change may replace.
--
-- KEYS[1]  the month's calendar: a string of 2-bit fields, day d at bit
--          offset 2*(d-1), most significant bit first (the layout of
--          BITFIELD key GET u2 #(d-1))
-- ARGV[1]  the day's field index, d-1 (0 to 30)
-- ARGV[2]  the new mark (0 to 3)
-- ARGV[3]  the marks it may replace, as a mask: bit m set (value 2^m)
--          allows replacing mark m
-- ARGV[4]  the key's expiry in ms since the epoch
--
-- Reply: {previous mark, changed}: changed is 1 if the day now has the
-- new mark, 0 if it kept the previous one.
--
-- Why GETRANGE/SETRANGE and arithmetic: miniredis has neither BITFIELD
-- nor Lua's bit library, and one byte holds the whole field (four days a
-- byte, fields never straddle two). SETRANGE pads a short or missing
-- string with zero bytes, which are unmarked days.
local key = KEYS[1]
local field = tonumber(ARGV[1])
local new, mask = tonumber(ARGV[2]), tonumber(ARGV[3])

local at = math.floor(field / 4)
local unit = 2 ^ (6 - 2 * (field % 4)) -- the field's lowest bit's value
local s = redis.call('GETRANGE', key, at, at)
local byte = 0
if s ~= '' then
  byte = string.byte(s)
end
local old = math.floor(byte / unit) % 4

if math.floor(mask / 2 ^ old) % 2 ~= 1 then
  return {old, 0}
end
redis.call('SETRANGE', key, at, string.char(byte + (new - old) * unit))
redis.call('PEXPIREAT', key, ARGV[4])
return {old, 1}
