-- What a coalesced invocation (`coalesced.lua`) needs of GCRA: the arguments
-- per key; a lone check goes through `admit`, which decides it alone.
local PER_KEY, admit_lones = 5, nil
