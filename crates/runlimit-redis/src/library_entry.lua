
-- Registers `entry` (the script's entry point) under the function name the
-- client substitutes for RUNLIMIT_FUNCTION (the library's own name). A call
-- sets what the script prelude sets and clears what a previous call, even a
-- failed one, left.
redis.register_function('RUNLIMIT_FUNCTION', function(keys, args)
    KEYS, ARGV = keys, args
    if not find then
        find, sub, format, ceil = string.find, string.sub, string.format, math.ceil
        match, floor, concat = string.match, math.floor, table.concat
    end
    local clock = redis.call('TIME')
    now = clock[1] * 1000000 + clock[2]
    probing, granting, room, states, ahead = false, nil, 0, nil, nil
    return entry()
end)
