-- Anchored fixed windows: `admit` decides one batch of counters atomically.
-- Its keys are KEYS[k + 1 .. k + n]; its ARGV from a + 1: limit, window_us,
-- cost for each key, in order. A negative window_us marks a check whose
-- counter may carry another's state (`carry.lua`).
-- State: "used:expires_us" per counter, expiring with its window.
-- Replies: for each key outcome (0 allowed, 1 quota exceeded), used, expires_us;
-- then now_us. Where a marked check's counter holds no live state, nothing
-- is written and the reply is {-1, now_us}: the client carries first.
local stored = {0, 0}

-- One counter's check (not a grant): the common case, decided without the
-- batch machinery. A live window's value keeps its expiry text and its key
-- its TTL, so the write formats one small integer and computes no expiry.
-- Returns nil, changing nothing, for a state that is not exactly two
-- integers (the general path below decides those).
local function admit_one(i, limit, window, cost)
    local key, state = KEYS[i], read(i)
    if state then
        local colon = find(state, ':', 1, true)
        local used = colon and tonumber(sub(state, 1, colon - 1))
        local expires = colon and tonumber(sub(state, colon + 1))
        if not (used and expires) then
            return nil
        end
        if expires > now then
            if used + cost > tonumber(limit) then
                return {1, used, expires, now}
            end
            used = used + cost
            -- `used` is at most 1e9: '..' writes it as an integer.
            local value = used .. sub(state, colon)
            redis.call('SET', key, value, 'KEEPTTL')
            if ahead then
                ahead[key] = value
            end
            return {0, used, expires, now}
        end
    end
    window = tonumber(window)
    if window < 0 then
        return {-1, now}
    end
    local expires = now + window
    if cost > tonumber(limit) then
        return {1, 0, expires, now}
    end
    keep(key, format('%d:%d', cost, expires), expires)
    return {0, cost, expires, now}
end

local function admit(k, n, a)
    if n == 1 and not probing and not granting then
        local reply = admit_one(k + 1, ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3]))
        if reply then
            return reply
        end
    end
    local reply = n == 1 and {0, 0, 0, 0} or {}
    local marked = false
    all_or_nothing(n, function(i)
        local at = 3 * i
        local limit, window, cost = tonumber(ARGV[a + at - 2]), tonumber(ARGV[a + at - 1]), tonumber(ARGV[a + at])
        -- No window, an expired one or unreadable state: the next allowed check
        -- anchors anew.
        local used, expires = 0, now + window
        local state = read(k + i)
        if state and fields(state, stored) >= 2 and stored[1] and stored[2] and stored[2] > now then
            used, expires = stored[1], stored[2]
        elseif window < 0 then
            marked = true
            return false
        end
        if granting then
            cost = granting
        elseif probing then
            room = limit - used
            return false
        end
        local outcome = 0
        if used + cost <= limit then
            used = used + cost
        else
            outcome = 1
        end
        reply[at - 2], reply[at - 1], reply[at] = outcome, used, expires
        return outcome == 0
    end, function(i)
        local at = 3 * i
        keep(KEYS[k + i], format('%d:%d', reply[at - 1], reply[at]), reply[at])
    end)
    if marked then
        return {-1, now}
    end
    reply[3 * n + 1] = now
    return reply
end
