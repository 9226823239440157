-- Keeps fixed windows' `admit` for `any.lua`, before the next algorithm's
-- script declares its own.
local admit_fixed_window = admit
