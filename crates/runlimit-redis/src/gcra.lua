-- GCRA: `admit` decides one batch of counters atomically.
-- Follows `exact_division.lua`.
-- State: "tat_us:tat_rem:version" per counter: the theoretical arrival time
-- as whole microseconds and a remainder in units of 1/quota microsecond, and
-- the version refunds compare with their receipts (the creation time of the
-- counter, in microseconds; counters stored before versions existed read as
-- version 0).
-- Its keys are KEYS[k + 1 .. k + n]; its ARGV from a + 1, for each key:
-- quota, increment_us, increment_rem, tolerance_us, tolerance_rem (products
-- already reduced by the client, so every value here stays below 2^53). A
-- negative quota marks a check whose counter may carry another's state
-- (`carry.lua`).
-- Replies: for each key outcome (0 allowed, 1 quota exceeded), ahead_us,
-- ahead_rem (how far the new arrival time lies ahead of now) and the version;
-- then now_us. Where a marked check's counter holds no live state, nothing
-- is written and the reply is {-1, now_us}: the client carries first.
local stored = {0, 0, 0}

-- How many increments of (us, rem / quota) µs fit between an arrival time
-- `ahead_us` + `ahead_rem` / quota ahead of now and the tolerance: estimated
-- in floating point, then made exact against `times`.
local function fitting(ahead_us, ahead_rem, us, rem, tol_us, tol_rem, quota)
    local function fits(n)
        local whole, fraction = times(n, us, rem, quota)
        whole, fraction = ahead_us + whole, ahead_rem + fraction
        if fraction >= quota then
            whole, fraction = whole + 1, fraction - quota
        end
        return whole < tol_us or (whole == tol_us and fraction <= tol_rem)
    end
    local n = floor(((tol_us - ahead_us) + (tol_rem - ahead_rem) / quota) / (us + rem / quota))
    if n < 0 then
        n = 0
    end
    while n > 0 and not fits(n) do
        n = n - 1
    end
    while fits(n + 1) do
        n = n + 1
    end
    if not fits(n) then
        return -1
    end
    return n
end

-- Where a check of KEYS[i] starts: its arrival time and remainder, the later
-- of the stored one and now (unreadable state starts at now), and its
-- version (a counter not stored starts with its creation time).
local function start_of(i)
    local t, r, version = now, 0, now
    local state = read(i)
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
    return t, r, version
end

-- Stores an arrival time; the counter is worthless once the full burst has
-- replenished, when Redis forgets it.
local function store(key, t, r, version)
    local expires = t
    if r > 0 then
        expires = expires + 1
    end
    keep(key, format('%d:%d:%d', t, r, version), expires)
end

-- One counter's check (not a grant): the common case, decided as `admit`
-- decides it, without the batch machinery (its closures and tables).
local function admit_one(i, a)
    local key = KEYS[i]
    local quota = tonumber(ARGV[a + 1])
    local inc_us, inc_rem = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    local tol_us, tol_rem = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
    local t, r, version = start_of(i)
    if quota < 0 then
        -- Marked: `start_of` starts a counter without live state at now.
        if t == now and r == 0 then
            return {-1, now}
        end
        quota = -quota
    end
    t = t + inc_us
    r = r + inc_rem
    if r >= quota then
        t = t + 1
        r = r - quota
    end
    local ahead = t - now
    if ahead > tol_us or (ahead == tol_us and r > tol_rem) then
        return {1, ahead, r, version, now}
    end
    store(key, t, r, version)
    return {0, ahead, r, version, now}
end

local function admit(k, n, a)
    if n == 1 and not probing and not granting then
        return admit_one(k + 1, a)
    end
    local reply = n == 1 and {0, 0, 0, 0, 0} or {}
    local tat_us, tat_rem, versions = {}, {}, {}
    local marked = false
    all_or_nothing(n, function(i)
        local base = a + 5 * (i - 1)
        local quota = tonumber(ARGV[base + 1])
        local inc_us, inc_rem = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
        local tol_us, tol_rem = tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5])
        local t, r, version = start_of(k + i)
        if quota < 0 then
            if t == now and r == 0 then
                marked = true
                return false
            end
            quota = -quota
        end
        if granting then
            inc_us, inc_rem = times(granting, inc_us, inc_rem, quota)
        elseif probing then
            room = fitting(t - now, r, inc_us, inc_rem, tol_us, tol_rem, quota)
            return false
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
        store(KEYS[k + i], tat_us[i], tat_rem[i], versions[i])
    end)
    if marked then
        return {-1, now}
    end
    reply[4 * n + 1] = now
    return reply
end
