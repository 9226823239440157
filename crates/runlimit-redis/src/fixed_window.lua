-- Anchored fixed windows for a batch of counters, decided atomically.
-- KEYS[i]: the counter keys. ARGV: limit, window_us, cost for each key, in order.
-- State: one string "used:expires_us" per counter, expiring with its window.
-- Replies: for each key outcome (0 allowed, 1 quota exceeded), used, expires_us;
-- then now_us. Nothing is written unless every check is allowed.
-- All integers stay below 2^53, where Lua's doubles are exact: limits and costs
-- are at most 1e9 and times are microseconds since the epoch; '%d' formats
-- them through a 64-bit integer, never in exponent notation.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local used, expires, outcome = {}, {}, {}
local denied = false
for i = 1, #KEYS do
    local limit = tonumber(ARGV[3 * i - 2])
    local window = tonumber(ARGV[3 * i - 1])
    local cost = tonumber(ARGV[3 * i])
    local u, e
    local state = redis.call('GET', KEYS[i])
    if state then
        local stored_used, stored_expires = string.match(state, '^(%d+):(%d+)$')
        u, e = tonumber(stored_used), tonumber(stored_expires)
    end
    if u == nil or e == nil or e <= now then
        -- No window, or an expired one: the next allowed check anchors anew.
        u = 0
        e = now + window
    end
    if u + cost <= limit then
        outcome[i] = 0
        u = u + cost
    else
        outcome[i] = 1
        denied = true
    end
    used[i] = u
    expires[i] = e
end
if not denied then
    for i = 1, #KEYS do
        -- Redis drops the counter by itself once its window has ended.
        redis.call('SET', KEYS[i], string.format('%d:%d', used[i], expires[i]),
            'PXAT', string.format('%d', math.ceil(expires[i] / 1000)))
    end
end
local reply = {}
for i = 1, #KEYS do
    reply[#reply + 1] = outcome[i]
    reply[#reply + 1] = used[i]
    reply[#reply + 1] = expires[i]
end
reply[#reply + 1] = now
return reply
