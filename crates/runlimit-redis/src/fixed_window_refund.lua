-- Refunds of fixed-window admissions: `credit_fixed_window(i, at)` gives
-- back what a receipt names for KEYS[i], its ARGV from at + 1: cost (the units given back:
-- the whole cost, or what a settlement returns), expires_us (the window
-- the receipt names), used_after (the count the admission left), window_us.
-- Credited only while the named window is still the live one:
--   * nothing else left in it: the counter is deleted, as if never admitted;
--   * the refunded check started the window and later ones remain: the
--     window is moved to end one window after now, never earlier than it
--     would have without the refunded check (whose successor started it at
--     some unknown time before now); the new expiry voids the window's other
--     receipts;
--   * otherwise the cost is subtracted.
local stored = {0, 0}

local function credit_fixed_window(i, at)
    local cost, named = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
    local used_after, window = tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4])
    local credited = 0
    local state = redis.call('GET', KEYS[i])
    if state and fields(state, stored) == 2 then
        local used, expires = stored[1], stored[2]
        if used and expires and expires == named and expires > now and used > 0 then
            credited = 1
            if used <= cost then
                redis.call('DEL', KEYS[i])
            else
                if used_after == cost and now + window > expires then
                    expires = now + window
                end
                keep(KEYS[i], format('%d:%d', used - cost, expires), expires)
            end
        end
    end
    return credited
end

-- What `refund_entry.lua` runs for each key.
local credit, PER_CREDIT = credit_fixed_window, 4
