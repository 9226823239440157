-- What a coalesced invocation (`coalesced.lua`) needs of sliding windows: the
-- arguments per key; a lone check goes through `admit`.
local PER_KEY, admit_lones = 3, nil
