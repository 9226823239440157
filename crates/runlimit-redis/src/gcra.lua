-- GCRA: `admit` decides one batch of counters atomically.
-- State: "tat_us:tat_rem:version" per counter: the theoretical arrival time
-- as whole microseconds and a remainder in units of 1/quota microsecond, and
-- the version refunds compare with their receipts (the creation time of the
-- counter, in microseconds; counters stored before versions existed read as
-- version 0).
-- Its keys are KEYS[k + 1 .. k + n]; its ARGV from a + 1, for each key:
-- quota, increment_us, increment_rem, tolerance_us, tolerance_rem (products
-- already reduced by the client, so every value here stays below 2^53).
-- Replies: for each key outcome (0 allowed, 1 quota exceeded), ahead_us,
-- ahead_rem (how far the new arrival time lies ahead of now) and the version;
-- then now_us.
local stored = {0, 0, 0}
local function admit(k, n, a)
    local reply = n == 1 and {0, 0, 0, 0, 0} or {}
    local tat_us, tat_rem, versions = {}, {}, {}
    all_or_nothing(n, function(i)
        local base = a + 5 * (i - 1)
        local quota = tonumber(ARGV[base + 1])
        local inc_us, inc_rem = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
        local tol_us, tol_rem = tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5])
        -- start = max(stored arrival time, now); unreadable state starts at now.
        -- A counter not stored starts with its creation time as version.
        local t, r, version = now, 0, now
        local state = redis.call('GET', KEYS[k + i])
        if state then
            local count = fields(state, stored)
            local stored_t, stored_r = stored[1], stored[2]
            if count >= 2 then
                version = count >= 3 and stored[3] or 0
                if stored_t and stored_r and (stored_t > now or (stored_t == now and stored_r > 0)) then
                    t, r = stored_t, stored_r
                end
            end
        end
        t = t + inc_us
        r = r + inc_rem
        if r >= quota then
            t = t + 1
            r = r - quota
        end
        tat_us[i], tat_rem[i], versions[i] = t, r, version
        local ahead = t - now
        local outcome = 0
        if ahead > tol_us or (ahead == tol_us and r > tol_rem) then
            outcome = 1
        end
        local at = 4 * i
        reply[at - 3], reply[at - 2], reply[at - 1], reply[at] = outcome, ahead, r, version
        return outcome == 0
    end, function(i)
        -- The counter is worthless once the full burst has replenished.
        local expires = tat_us[i]
        if tat_rem[i] > 0 then
            expires = expires + 1
        end
        keep(KEYS[k + i], format('%d:%d:%d', tat_us[i], tat_rem[i], versions[i]), expires)
    end)
    reply[4 * n + 1] = now
    return reply
end
