-- Policies of any algorithm (`AnyPolicy`): `admit` decides one check with its
-- algorithm's own `admit`, and a batch, which may mix algorithms,
-- atomically. Follows the three algorithms' scripts, each `admit` kept
-- under its algorithm's name (`any_*.lua`); GCRA's is the last declared.
-- Its keys are KEYS[k + 1 .. k + n]; its ARGV from a + 1, for each key: the
-- algorithm (1 fixed window, 2 sliding window, 3 GCRA), then the
-- algorithm's arguments for the key, padded with zeros to five.
-- Replies: for one check, its algorithm's reply; for a batch, per key its
-- algorithm's reply for the key alone without now_us, or -2 for a check that
-- fits where another is denied (nothing is consumed, so what it would have
-- left is not reported), then now_us; or, when a marked check must carry,
-- {-1, now_us}, as every algorithm answers.
local admit_gcra = admit
local PER_KEY = 6
local ADMITS = {admit_fixed_window, admit_sliding_window, admit_gcra}

local function admit(k, n, a)
    if n == 1 then
        return ADMITS[tonumber(ARGV[a + 1])](k, 1, a + 1)
    end
    -- Every check is measured first, as a grant measures its room (nothing
    -- is written); only if all fit is each admitted. A window's room is in
    -- units, GCRA's in increments of the check's cost.
    local fits, all_fit = {}, true
    for i = 1, n do
        local base = a + PER_KEY * (i - 1)
        local kind = tonumber(ARGV[base + 1])
        probing, room = true, 0
        local measured = ADMITS[kind](k + i - 1, 1, base + 1)
        probing = false
        if measured[1] == -1 then
            return measured
        end
        fits[i] = room >= (kind == 3 and 1 or tonumber(ARGV[base + 4]))
        if not fits[i] then
            all_fit = false
        end
    end
    local reply = {}
    for i = 1, n do
        local base = a + PER_KEY * (i - 1)
        if all_fit or not fits[i] then
            local decided = ADMITS[tonumber(ARGV[base + 1])](k + i - 1, 1, base + 1)
            for j = 1, #decided - 1 do
                reply[#reply + 1] = decided[j]
            end
        else
            reply[#reply + 1] = -2
        end
    end
    reply[#reply + 1] = now
    return reply
end
