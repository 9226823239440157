-- What a coalesced invocation (`coalesced.lua`) needs of policies of any
-- algorithm (`any.lua`): the arguments per key, and runs of lone checks
-- decided by their algorithm's `admit_lones` (the run's first argument
-- names the algorithm, its own arguments follow); GCRA's lone checks, and
-- what those stop at, go through `admit`, which decides each with its
-- algorithm's own.
local PER_KEY = 6
local LONES = {admit_lones_fixed_window, admit_lones_sliding_window}

local function admit_lones(out, at, k, a, r)
    local lones = LONES[tonumber(ARGV[a + 1])]
    if not lones then
        return at, 0
    end
    return lones(out, at, k, a + 1, r)
end
