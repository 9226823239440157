-- Anchored fixed windows for a batch of counters, decided atomically.
-- KEYS[i]: the counter keys. ARGV: limit, window_us, cost for each key, in order.
-- Replies: for each key outcome (0 allowed, 1 quota exceeded), used, expires_us;
-- then now_us. Nothing is written unless every check is allowed.
-- All integers stay below 2^53, where Lua's doubles are exact: limits and costs
-- are at most 1e9 and times are microseconds since the epoch.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local used, expires, outcome = {}, {}, {}
local denied = false
for i = 1, #KEYS do
    local limit = tonumber(ARGV[3 * i - 2])
    local window = tonumber(ARGV[3 * i - 1])
    local cost = tonumber(ARGV[3 * i])
    local state = redis.call('HMGET', KEYS[i], 'u', 'e')
    local u, e = tonumber(state[1]), tonumber(state[2])
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
        redis.call('HSET', KEYS[i], 'u', used[i], 'e', expires[i])
        -- Redis drops the counter by itself once its window has ended.
        redis.call('PEXPIREAT', KEYS[i], math.ceil(expires[i] / 1000))
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
