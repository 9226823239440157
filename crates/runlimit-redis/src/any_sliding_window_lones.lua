-- Keeps sliding windows' `admit_lones` for `any_coalesced.lua`.
local admit_lones_sliding_window = admit_lones
