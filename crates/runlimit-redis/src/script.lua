-- The prelude of a script run with EVALSHA: the libraries the scripts use,
-- and Redis's clock (TIME), read once, in microseconds.
local find, sub, format, ceil = string.find, string.sub, string.format, math.ceil
local match, floor, concat = string.match, math.floor, table.concat
local clock = redis.call('TIME')
local now = clock[1] * 1000000 + clock[2]
