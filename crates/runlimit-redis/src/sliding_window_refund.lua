-- Refunds of sliding-window admissions, one atomic script for a receipt.
-- KEYS[i]: the counter keys. ARGV for each key: sub_window_us, cost,
-- admitted_in (the eighth the admission was counted in), version.
-- Replies: for each key 1 if credited, else 0.
-- Gives the cost back to the eighth the admission was counted in, at most
-- what that eighth still holds, while it still counts and the counter's
-- version is the receipt's. The counts are then exactly those without the
-- refunded check, so no version changes, and the key keeps its expiry.
local reply = {}
local stored = {}
for i = 1, #KEYS do
    local at = 4 * (i - 1)
    local g, cost = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
    local admitted_in, version = tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4])
    local credited = 0
    local state = redis.call('GET', KEYS[i])
    if state and fields(state, stored) == 11 and stored[1] and stored[2] == version
        and (admitted_in + 9) * g > now then
        -- stored[1] is a multiple of g, so the division is exact.
        local slot = stored[1] / g - 9 - admitted_in
        local count = stored[3 + slot]
        if slot >= 0 and slot < 9 and count and count > 0 then
            stored[3 + slot] = count > cost and count - cost or 0
            keep(KEYS[i], format('%d:%d:%d:%d:%d:%d:%d:%d:%d:%d:%d', stored[1], stored[2],
                stored[3], stored[4], stored[5], stored[6], stored[7], stored[8], stored[9],
                stored[10], stored[11]), stored[1])
            credited = 1
        end
    end
    reply[i] = credited
end
return reply
