-- Keeps fixed windows' `admit_lones` for `any_coalesced.lua`, before the next
-- algorithm's coalesced code declares its own.
local admit_lones_fixed_window = admit_lones
