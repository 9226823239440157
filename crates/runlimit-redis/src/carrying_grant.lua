-- A grant that carries state into its counter first (`carry.lua`).
-- Replies: the ordinal of the source the counter carried from (0 for none),
-- then the reply of the same grant sent alone.
local carried = carry_all()
return {carried, grant()}
