-- Which eighth of a sliding window a time falls in, for sliding windows
-- and for carried states (`carry.lua`).

-- The eighth `time` falls in: exact, since floor(time / g) may be off by one
-- where the quotient rounds to an integer, and products below 2^53 are exact.
local function eighth(time, g)
    local index = floor(time / g)
    if index * g > time then
        return index - 1
    elseif (index + 1) * g <= time then
        return index + 1
    end
    return index
end
