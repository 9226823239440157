-- GCRA for a batch of counters, decided atomically.
-- State: one string "tat_us:tat_rem" per counter: the theoretical arrival time
-- as whole microseconds and a remainder in units of 1/quota microsecond.
-- KEYS[i]: the counter keys. ARGV for each key: quota, increment_us,
-- increment_rem, tolerance_us, tolerance_rem (products already reduced by the
-- client, so every value here stays below 2^53).
-- Replies: for each key outcome (0 allowed, 1 quota exceeded), ahead_us,
-- ahead_rem (how far the new arrival time lies ahead of now).
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local tat_us, tat_rem, ahead_us, ahead_rem, outcome = {}, {}, {}, {}, {}
local denied = false
for i = 1, #KEYS do
    local base = 5 * (i - 1)
    local quota = tonumber(ARGV[base + 1])
    local inc_us, inc_rem = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
    local tol_us, tol_rem = tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5])
    local t, r
    local state = redis.call('GET', KEYS[i])
    if state then
        local stored_t, stored_r = string.match(state, '^(%d+):(%d+)$')
        t, r = tonumber(stored_t), tonumber(stored_r)
    end
    -- start = max(stored arrival time, now)
    if t == nil or r == nil or t < now or (t == now and r == 0) then
        t, r = now, 0
    end
    t = t + inc_us
    r = r + inc_rem
    if r >= quota then
        t = t + 1
        r = r - quota
    end
    tat_us[i], tat_rem[i] = t, r
    ahead_us[i], ahead_rem[i] = t - now, r
    if ahead_us[i] > tol_us or (ahead_us[i] == tol_us and ahead_rem[i] > tol_rem) then
        outcome[i] = 1
        denied = true
    else
        outcome[i] = 0
    end
end
if not denied then
    for i = 1, #KEYS do
        -- The entry is worthless once the full burst has replenished.
        local expires = tat_us[i]
        if tat_rem[i] > 0 then
            expires = expires + 1
        end
        redis.call('SET', KEYS[i], string.format('%d:%d', tat_us[i], tat_rem[i]),
            'PXAT', string.format('%d', math.ceil(expires / 1000)))
    end
end
local reply = {}
for i = 1, #KEYS do
    reply[#reply + 1] = outcome[i]
    reply[#reply + 1] = ahead_us[i]
    reply[#reply + 1] = ahead_rem[i]
end
return reply
