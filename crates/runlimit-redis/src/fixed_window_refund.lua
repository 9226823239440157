-- Refunds of fixed-window admissions, one atomic script for a receipt.
-- KEYS[i]: the counter keys. ARGV for each key: cost (the units given back:
-- the whole cost, or what a settlement returns), expires_us (the window
-- the receipt names), used_after (the count the admission left), window_us.
-- Replies: for each key 1 if credited, else 0.
-- Credited only while the named window is still the live one:
--   * nothing else left in it: the counter is deleted, as if never admitted;
--   * the refunded check started the window and later ones remain: the
--     window is moved to end one window after now, never earlier than it
--     would have without the refunded check (whose successor started it at
--     some unknown time before now); the new expiry voids the window's other
--     receipts;
--   * otherwise the cost is subtracted.
local max = math.max
local reply = {}
local stored = {0, 0}
for i = 1, #KEYS do
    local at = 4 * (i - 1)
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
                if used_after == cost then
                    expires = max(now + window, expires)
                end
                keep(KEYS[i], format('%d:%d', used - cost, expires), expires)
            end
        end
    end
    reply[i] = credited
end
return reply
