-- A grant (`grant.lua`).
return grant()
