-- The prelude of the same code loaded as a function library (FUNCTION LOAD),
-- which defines its functions once rather than at every invocation. Loading
-- sees neither KEYS, ARGV nor Lua's libraries, so these are set at each call
-- (`library_entry.lua`).
local KEYS, ARGV, now
local find, sub, format, ceil, match, floor, concat
