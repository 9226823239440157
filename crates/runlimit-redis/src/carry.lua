-- Carrying a subject's state across a change of policy or secret (see
-- runlimit_core::carry): a counter whose key holds no live state starts from
-- the state of the first of its sources that holds some, translated to the
-- counter's policy exactly as the client's core translates it, at `now`.
-- Follows `exact_division.lua`, `eighths.lua` and the algorithm's script.
--
-- A carrying invocation is an ordinary one (a check, a batch, a grant) whose
-- KEYS end with the keys of sources in the counters' slot and whose ARGV end
-- with a carry section. `carry_all` reads the section, carries, and removes
-- the section and the source keys, so the invocation then decides exactly as
-- it would have without them. The section, after the invocation's own
-- arguments:
--   per counter, in KEYS' order: its policy's kind (1 fixed window, 2
--   sliding window, 3 GCRA) and four parameters,
--     fixed window: limit, window_us, the most windows the horizon holds, 0;
--     sliding window: limit, sub_window_us, the most windows the horizon
--       holds, window_us;
--     GCRA: quota, the emission interval (us, rem / quota), the fewest units
--       whose emission intervals reach the horizon;
--   then how many sources it has, and per source: its ordinal among the
--   check's carry sources, where its state is (k > 0: KEYS[k]; 0: the next
--   argument, read by the client from another slot), its policy's kind,
--   whether the translation keeps the state as it is (1: a fixed or sliding
--   window of the same length, GCRA of the same emission interval), and five
--   parameters,
--     fixed window: none (zeros);
--     sliding window: sub_window_us, then zeros;
--     GCRA: quota, the emission interval (us, rem / quota), and the
--       counter's quota over the source's as a reduced fraction (a, b);
--   then the horizon (us: core's limit on how far ahead a carried state
--   reaches), the number of source keys, and the section's length.
-- Every product of two policy parameters is the client's (128-bit
-- integers); the products here are of a count and a parameter, below the
-- horizon, or of the scripts' states, so every integer stays below 2^53.

-- The integers of a state being read.
local carried_fields = {}

-- Reads `text` into `carried_fields`; returns how many fields it has (0 for
-- no state).
local function carried_parse(text)
    if not text then
        return 0
    end
    return fields(text, carried_fields)
end

-- Whether `text` is live state for a counter of `kind`: exactly what a
-- marked check of that algorithm finds before it answers that it must carry.
local function live(kind, text)
    local count, f = carried_parse(text), carried_fields
    if kind == 1 then
        return count >= 2 and f[1] ~= nil and f[2] ~= nil and f[2] > now
    elseif kind == 2 then
        if count < 3 or count > 11 then
            return false
        end
        for j = 1, count do
            if not f[j] then
                return false
            end
        end
        return f[1] > now
    end
    return count >= 2 and f[1] ~= nil and f[2] ~= nil and (f[1] > now or (f[1] == now and f[2] > 0))
end

-- A sliding-window state (eighths of `g`) as of now: the number of the
-- eighth its counts end with, the nine counts (1 the latest) and their sum;
-- nil for unreadable state. A clock that stepped back leaves the counts as
-- they are.
local function sliding_now(text, g)
    local count, f = carried_parse(text), carried_fields
    if count < 3 or count > 11 then
        return nil
    end
    for j = 1, count do
        if not f[j] then
            return nil
        end
    end
    local latest = eighth(f[1], g) - 9
    local shift = eighth(now, g) - latest
    if shift < 0 then
        shift = 0
    end
    local counts, total = {}, 0
    for j = 1, 9 do
        local c, stored_at = 0, j - shift + 2
        if j > shift and stored_at <= count then
            c = f[stored_at]
        end
        counts[j] = c
        total = total + c
    end
    return latest + shift, counts, total
end

-- The units counted by 2^38, beyond anything the scripts store (GCRA holds
-- at most its burst and a cost, a carried state at most a sliding window's
-- nine counts): `times` is exact below it.
local MOST_UNITS = 274877906944

-- The units an arrival time `t` + `r` / quota holds now, at an emission
-- interval of (us, rem / quota): the fewest whose intervals reach it, 0 once
-- it has passed; MOST_UNITS for more.
local function units_ahead(t, r, quota, us, rem)
    if t < now or (t == now and r == 0) then
        return 0
    end
    local ahead = t - now
    local function reach(n)
        local whole, fraction = times(n, us, rem, quota)
        return whole > ahead or (whole == ahead and fraction >= r)
    end
    local n = ceil((ahead + r / quota) / (us + rem / quota))
    if n < 1 then
        n = 1
    end
    if n >= MOST_UNITS then
        return MOST_UNITS
    end
    while n > 1 and reach(n - 1) do
        n = n - 1
    end
    while not reach(n) do
        n = n + 1
        if n >= MOST_UNITS then
            return MOST_UNITS
        end
    end
    return n
end

-- `held` units at `limit` per window: how many windows they fill (at least
-- one) and the units in the last of them.
local function spread(held, limit)
    local windows, over = divmod(held, limit)
    if over > 0 then
        windows = windows + 1
    end
    if windows < 1 then
        windows = 1
    end
    return windows, held - (windows - 1) * limit
end

-- The state a counter of kind `to` (parameters t1..t4) starts from, carrying
-- `text`, the state of a source of kind `from` (parameters p1..p5, `same`
-- as the section says), as core's `carry` translates it at now: the state's
-- text and when it expires, or nil when the source holds nothing (or
-- nothing readable). A new state's version is now, its creation time.
local function translated(text, from, same, p1, p2, p3, p4, p5, to, t1, t2, t3, t4, horizon)
    local held, used, expires, latest, counts, t, r
    if from == 1 then
        if carried_parse(text) < 2 or not carried_fields[1] or not carried_fields[2] then
            return nil
        end
        used, expires = carried_fields[1], carried_fields[2]
        held = expires > now and used or 0
    elseif from == 2 then
        latest, counts, held = sliding_now(text, p1)
        if not latest then
            return nil
        end
    else
        if carried_parse(text) < 2 or not carried_fields[1] or not carried_fields[2] then
            return nil
        end
        t, r = carried_fields[1], carried_fields[2]
        held = units_ahead(t, r, p1, p2, p3)
    end
    if held <= 0 then
        return nil
    end
    if to == 1 then
        -- A window of the same length keeps its count and anchor; otherwise
        -- the units fill windows from now, a full one until the last they
        -- reach into has passed.
        if same ~= 1 then
            local windows, last = spread(held, t1)
            if windows <= t3 then
                used, expires = windows == 1 and last or t1, now + windows * t2
            else
                used, expires = t1, now + horizon
            end
        end
        return format('%d:%d', used, expires), expires
    elseif to == 2 then
        -- A window of the same length keeps its counts; otherwise the units
        -- are counted in an eighth ahead of now, as `runlimit_core::carry`
        -- says why.
        if same ~= 1 then
            local windows, last = spread(held, t1)
            local ahead
            counts = {0, 0, 0, 0, 0, 0, 0, 0, 0}
            if windows - 1 <= t3 then
                ahead = (windows - 1) * t4
                counts[1] = last
                if windows > 1 then
                    counts[9] = t1 - last
                end
            else
                counts[1] = t1
                ahead = horizon
            end
            latest = eighth(now + ahead, t2)
        end
        local sent = 9
        while sent > 1 and counts[sent] == 0 do
            sent = sent - 1
        end
        expires = (latest + 9) * t2
        return format('%d:%d:', expires, now) .. concat(counts, ':', 1, sent), expires
    end
    if same == 1 then
        -- The same emission interval: the arrival time, its remainder in the
        -- new quota's units (times a / b), rounded up.
        local whole, fraction = times(r, 0, p4, p5)
        if fraction > 0 then
            whole = whole + 1
        end
        if whole >= t1 then
            t, r = t + 1, 0
        else
            r = whole
        end
    elseif held >= t4 then
        t, r = now + horizon, 0
    else
        local whole, fraction = times(held, t2, t3, t1)
        t, r = now + whole, fraction
    end
    expires = r > 0 and t + 1 or t
    return format('%d:%d:%d', t, r, now), expires
end

-- Carries a state into every counter of the invocation whose key holds no
-- live state, from the first of its sources that holds some (the section
-- above), then removes the section from ARGV and the source keys from KEYS.
-- Returns, per counter, the ordinal of the source it carried from, or 0.
local function carry_all()
    local total = #ARGV
    local length = tonumber(ARGV[total])
    local horizon, source_keys = tonumber(ARGV[total - 2]), tonumber(ARGV[total - 1])
    local first = total - length + 1
    local counters = #KEYS - source_keys
    local at = first - 1
    local function take()
        at = at + 1
        return tonumber(ARGV[at])
    end
    local carried = {}
    for i = 1, counters do
        local to, t1, t2, t3, t4 = take(), take(), take(), take(), take()
        local sources = take()
        local wanted = not live(to, redis.call('GET', KEYS[i]))
        carried[i] = 0
        for _ = 1, sources do
            local ordinal, where = take(), take()
            local text = nil
            if where == 0 then
                at = at + 1
                text = ARGV[at]
            end
            local from, same = take(), take()
            local p1, p2, p3, p4, p5 = take(), take(), take(), take(), take()
            if wanted then
                if where > 0 then
                    text = redis.call('GET', KEYS[where])
                end
                local value, expires = translated(text, from, same, p1, p2, p3, p4, p5, to, t1, t2, t3, t4, horizon)
                if value then
                    keep(KEYS[i], value, expires)
                    carried[i] = ordinal
                    wanted = false
                end
            end
        end
    end
    for j = total, first, -1 do
        ARGV[j] = nil
    end
    for j = #KEYS, counters + 1, -1 do
        KEYS[j] = nil
    end
    return carried
end
