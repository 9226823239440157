-- Exact integer division and products of times by rationals, for GCRA's
-- arrival times and for carried states (`carry.lua`).

-- x // q and x % q for integers below 2^53: floor(x / q) may be off by one
-- where the quotient rounds, and products below 2^53 are exact.
local function divmod(x, q)
    local d = floor(x / q)
    local m = x - d * q
    if m < 0 then
        d, m = d - 1, m + q
    elseif m >= q then
        d, m = d + 1, m - q
    end
    return d, m
end

-- n increments of (us, rem / quota) µs, exactly: n * rem may pass 2^53
-- (both reach 1e9), so rem is split into halves of 15 bits.
local function times(n, us, rem, quota)
    local high, low = divmod(rem, 32768)
    local q1, r1 = divmod(n * high, quota)
    local q2, r2 = divmod(r1 * 32768 + n * low, quota)
    local whole, fraction = n * us + q1 * 32768 + q2, r2
    return whole, fraction
end
