-- A grant (`grant`): between the check's cost and an upper bound of units
-- of one counter, as many as it has room for now. KEYS and ARGV are a single
-- check's (for GCRA, with the increment of one unit), then ARGV[#ARGV - 1]
-- the cost and ARGV[#ARGV] the bound. A first pass of `admit` measures the
-- room without writing; the second admits min(bound, max(room, cost)) units,
-- on the same reading of the clock, in the same atomic script.
-- Replies: the units granted (0 when denied), then the admission's reply.
local function grant()
    local cost, bound = tonumber(ARGV[#ARGV - 1]), tonumber(ARGV[#ARGV])
    probing = true
    admit(0, 1, 0)
    probing = false
    local units = room
    if units > bound then
        units = bound
    end
    if units < cost then
        units = cost
    end
    granting = units
    local reply = admit(0, 1, 0)
    if reply[1] ~= 0 then
        units = 0
    end
    return {units, reply}
end
