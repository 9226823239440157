-- What a coalesced invocation (`coalesced.lua`) needs of policies of any
-- algorithm (`any.lua`): the arguments per key; a lone check goes through
-- `admit`, which decides it with its algorithm's own.
local PER_KEY, admit_lones = 6, nil
