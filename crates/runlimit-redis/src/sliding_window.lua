-- Sliding windows for a batch of counters, decided atomically.
-- State: "expires_us:version:c1:...:c9" per counter: the units admitted in
-- each of the nine eighths of a window ending with the eighth of the latest
-- admission (c1 that eighth, c9 the eighth eight before it); when they all
-- stop counting (the start of the ninth eighth after the latest, a multiple
-- of the eighth in microseconds, from which the latest eighth's number
-- follows), which is also when Redis forgets the key; and the version
-- refunds compare with their receipts (the counter's creation time).
-- KEYS[i]: the counter keys. ARGV for each key: limit, sub_window_us (an
-- eighth of the window), cost.
-- Replies: for each key outcome (0 allowed, 1 quota exceeded), the eighth and
-- the nine counts it was judged against (as of now, before the admission),
-- and the version; then now_us. The client derives what it reports from
-- those counts with the arithmetic every backend shares.
local n = #KEYS
local reply = {}
local stored = {}
local floor = math.floor

-- The eighth `time` falls in: exact, since floor(time / g) may be off by one
-- where the quotient rounds to an integer, and products below 2^53 are exact.
local function eighth(time, g)
    local index = floor(time / g)
    if index * g > time then
        return index - 1
    elseif (index + 1) * g <= time then
        return index + 1
    end
    return index
end

all_or_nothing(n, function(i)
    local at = 3 * (i - 1)
    local limit, g, cost = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
    local bucket = eighth(now, g)
    local latest, version = bucket, now
    local base = 12 * (i - 1)
    for j = 1, 9 do
        reply[base + 3 + j] = 0
    end
    -- Unreadable state counts as none.
    local state = redis.call('GET', KEYS[i])
    local readable = state and fields(state, stored) == 11
    if readable then
        for j = 1, 11 do
            if not stored[j] then
                readable = false
            end
        end
    end
    if readable then
        local stored_latest = eighth(stored[1], g) - 9
        version = stored[2]
        -- Eighths that fell out of the nine are dropped; a clock that
        -- stepped back leaves the counts as they are.
        local shift = bucket - stored_latest
        if shift <= 0 then
            latest, shift = stored_latest, 0
        end
        for j = shift + 1, 9 do
            reply[base + 3 + j] = stored[j + 2 - shift]
        end
    end
    local total = 0
    for j = 1, 9 do
        total = total + reply[base + 3 + j]
    end
    local outcome = 0
    if total + cost > limit then
        outcome = 1
    end
    reply[base + 1], reply[base + 2], reply[base + 3] = outcome, latest, version
    return outcome == 0
end, function(i)
    local at, base = 3 * (i - 1), 12 * (i - 1)
    local g, cost = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
    local expires = (reply[base + 2] + 9) * g
    keep(KEYS[i], format('%d:%d:%d:%d:%d:%d:%d:%d:%d:%d:%d', expires, reply[base + 3],
        reply[base + 4] + cost, reply[base + 5], reply[base + 6], reply[base + 7],
        reply[base + 8], reply[base + 9], reply[base + 10], reply[base + 11],
        reply[base + 12]), expires)
end)
reply[12 * n + 1] = now
return reply
