-- A check or batch that carries state into its counters first (`carry.lua`).
-- Replies: per counter the ordinal of the source it carried from (0 for
-- none), then the reply of the same check or batch sent alone.
local carried = carry_all()
return {carried, admit(0, #KEYS, 0)}
