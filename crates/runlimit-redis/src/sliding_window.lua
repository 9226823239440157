-- Sliding windows: `admit` decides one batch of counters atomically.
-- Follows `eighths.lua`.
-- State: "expires_us:version:c1:c2:..." per counter: when its units all stop
-- counting (the start of the ninth eighth after the eighth of the latest
-- admission, a multiple of the eighth in microseconds, from which that
-- eighth's number follows), which is also when Redis forgets the key; the
-- version refunds compare with their receipts (the counter's creation
-- time); and the units admitted in each of the nine eighths ending with the
-- latest (c1 that eighth, c9 the eighth eight before it), trailing zeros
-- left out, so a key whose units fall in one eighth reads three fields.
-- Its keys are KEYS[k + 1 .. k + n]; its ARGV from a + 1, for each key:
-- limit, sub_window_us (an eighth of the window), cost. A negative limit
-- marks a check whose counter may carry another's state (`carry.lua`).
-- Replies: for each key outcome (0 allowed, 1 quota exceeded), the number of
-- the eighth and the version, then s and the first s of the nine counts it
-- was judged against (as of now, before the admission; the rest are zero,
-- and not sent); then now_us. The client derives what it reports from those counts with
-- the arithmetic every backend shares. Where a marked check's counter holds
-- no live state, nothing is written and the reply is {-1, now_us}: the
-- client carries first.
local stored = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

local function admit(k, n, a)
    -- Sized for a single check with every count sent, so the common reply never
    -- grows; entries past its end are cleared before returning.
    local reply = n == 1 and {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0} or {}
    -- Where each check's reply begins; the reply holds what writing needs.
    local starts = n == 1 and {0} or {}
    local at = 0
    local marked = false

    all_or_nothing(n, function(i)
        local base = a + 3 * (i - 1)
        local limit, g, cost = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
        local latest, version, sent = eighth(now, g), now, 0
        starts[i] = at
        -- Unreadable state counts as none.
        local state = read(k + i)
        local count = state and fields(state, stored) or 0
        local readable = count >= 3 and count <= 11
        for j = 1, count do
            if not stored[j] then
                readable = false
            end
        end
        if limit < 0 then
            if not (readable and stored[1] > now) then
                marked = true
                return false
            end
            limit = -limit
        end
        local total = 0
        if readable then
            local stored_latest = eighth(stored[1], g) - 9
            version = stored[2]
            -- Eighths that fell out of the nine are dropped; a clock that
            -- stepped back leaves the counts as they are.
            local shift = latest - stored_latest
            if shift <= 0 then
                latest, shift = stored_latest, 0
            end
            local last = count - 2 + shift
            if last > 9 then
                last = 9
            end
            for j = 1, last do
                local c = 0
                if j > shift then
                    c = stored[j + 2 - shift]
                    total = total + c
                    if c > 0 then
                        sent = j
                    end
                end
                reply[at + 4 + j] = c
            end
        end
        if granting then
            cost = granting
        elseif probing then
            room = limit - total
            return false
        end
        local outcome = total + cost <= limit and 0 or 1
        reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4] = outcome, latest, version, sent
        at = at + 4 + sent
        return outcome == 0
    end, function(i)
        local base, start = a + 3 * (i - 1), starts[i]
        local g, cost = tonumber(ARGV[base + 2]), granting or tonumber(ARGV[base + 3])
        local sent = reply[start + 4]
        local expires = (reply[start + 2] + 9) * g
        local state = format('%d:%d:%d', expires, reply[start + 3], (reply[start + 5] or 0) + cost)
        if sent > 1 then
            state = state .. ':' .. concat(reply, ':', start + 6, start + 4 + sent)
        end
        keep(KEYS[k + i], state, expires)
    end)
    if marked then
        return {-1, now}
    end
    reply[at + 1] = now
    -- Trailing zeros are not sent: clear what the last check wrote past its end.
    for j = at + 2, at + 11 do
        reply[j] = nil
    end
    return reply
end
