-- Refunds of sliding-window admissions (state as sliding_window.lua stores
-- it): `credit_sliding_window(i, at)` gives back what a receipt names for
-- KEYS[i], its ARGV from at + 1: sub_window_us, cost (the units given back:
-- the whole cost, or what a settlement returns), admitted_in (the eighth the
-- admission was counted in), version.
-- Gives the cost back to the eighth the admission was counted in, at most
-- what that eighth still holds, while it still counts and the counter's
-- version is the receipt's. The counts are then exactly those without the
-- refunded check, so no version changes, and the key keeps its expiry.
local stored = {}

local function credit_sliding_window(i, at)
    local g, cost = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
    local admitted_in, version = tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4])
    local credited = 0
    local state = redis.call('GET', KEYS[i])
    local fieldcount = state and fields(state, stored) or 0
    for j = 1, fieldcount do
        if not stored[j] then
            -- Unreadable state: nothing to credit.
            fieldcount = 0
        end
    end
    if fieldcount >= 3 and fieldcount <= 11 and stored[1] and stored[2] == version
        and (admitted_in + 9) * g > now then
        -- stored[1] is a multiple of g, so the division is exact.
        local slot = stored[1] / g - 9 - admitted_in
        local count = slot >= 0 and slot + 3 <= fieldcount and stored[3 + slot]
        if count and count > 0 then
            stored[3 + slot] = count > cost and count - cost or 0
            -- Trailing zero counts are left out, as admissions store them.
            local last = fieldcount
            while last > 3 and stored[last] == 0 do
                last = last - 1
            end
            keep(KEYS[i], format('%d:%d:', stored[1], stored[2]) .. table.concat(stored, ':', 3, last),
                stored[1])
            credited = 1
        end
    end
    return credited
end

-- What `refund_entry.lua` runs for each key.
local credit, PER_CREDIT = credit_sliding_window, 4
