-- Anchored fixed windows for a batch of counters, decided atomically.
-- KEYS[i]: the counter keys. ARGV: limit, window_us, cost for each key, in order.
-- State: one string "used:expires_us" per counter, expiring with its window.
-- Replies: for each key outcome (0 allowed, 1 quota exceeded), used, expires_us;
-- then now_us. Nothing is written unless every check is allowed.
-- All integers stay below 2^53, where Lua's doubles are exact: limits and costs
-- are at most 1e9 and times are microseconds since the epoch; '%d' formats
-- them through a 64-bit integer, never in exponent notation.
-- The server's script engine, not the arithmetic, dominates the cost of a
-- check, so the script avoids pattern matching, global lookups and table
-- growth for the common single check.
local clock = redis.call('TIME')
local now = clock[1] * 1000000 + clock[2]
local find, sub, format, ceil = string.find, string.sub, string.format, math.ceil
local n = #KEYS
local reply = n == 1 and {0, 0, 0, 0} or {}
local denied = false
for i = 1, n do
    local at = 3 * i
    local limit, window, cost = tonumber(ARGV[at - 2]), tonumber(ARGV[at - 1]), tonumber(ARGV[at])
    -- No window, an expired one or unreadable state: the next allowed check
    -- anchors anew.
    local used, expires = 0, now + window
    local state = redis.call('GET', KEYS[i])
    if state then
        local separator = find(state, ':', 1, true)
        if separator then
            local stored_used = tonumber(sub(state, 1, separator - 1))
            local stored_expires = tonumber(sub(state, separator + 1))
            if stored_used and stored_expires and stored_expires > now then
                used, expires = stored_used, stored_expires
            end
        end
    end
    local outcome = 0
    if used + cost <= limit then
        used = used + cost
    else
        outcome = 1
        denied = true
    end
    reply[at - 2], reply[at - 1], reply[at] = outcome, used, expires
end
if not denied then
    for i = 1, n do
        local at = 3 * i
        local expires = reply[at]
        -- Redis drops the counter by itself once its window has ended. The
        -- relative expiry in whole milliseconds stays below 1e14, so Lua
        -- passes it as an exact integer; the extra millisecond keeps it from
        -- expiring early when the server's own millisecond clock lags TIME.
        redis.call('SET', KEYS[i], format('%d:%d', reply[at - 1], expires),
            'PX', ceil((expires - now) / 1000) + 1)
    end
end
reply[3 * n + 1] = now
return reply
