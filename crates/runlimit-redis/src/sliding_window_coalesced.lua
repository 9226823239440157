-- What a coalesced invocation (`coalesced.lua`) needs of sliding windows: the
-- arguments per key, and runs of lone checks decided without the batch
-- machinery. `admit` builds two closures and two tables per check and formats
-- and parses every count; under load that made a coalesced sliding-window
-- check cost the server about four times a fixed-window one. The loop below
-- decides the common cases as `admit` does, with as few C calls as it can:
-- a counter whose latest eighth is the current one (its expiry the current
-- eighth's), and a missing counter.
local PER_KEY = 3

-- SETRANGE's digits and offsets as strings the script holds already (a Lua
-- number passed to a command is formatted through a costly '%.17g').
local SLIDING_DIGIT = {[0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}
local OFFSETS = {}

local function offset_text(offset)
    local text = OFFSETS[offset]
    if not text then
        text = format('%d', offset)
        OFFSETS[offset] = text
    end
    return text
end

-- Up to `r` lone checks of KEYS[k + 1 .. k + r] sharing the arguments at
-- ARGV[a + 1 ..] (limit, an eighth of the window, cost), each decided as
-- `admit` decides it, their replies appended to `out` after `at`; returns
-- where `out` ends and how many it decided. It stops, changing nothing, at
-- any other state (an earlier eighth's, an unreadable one, a marked check's
-- missing counter), which the caller decides through `admit`. A check's
-- reply is the state it was decided on, as read ('' for none): the client,
-- which sent the arguments, derives from it the reply `admit` would give.
local function admit_lones(out, at, k, a, r)
    local limit, g, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    -- A marked check (a negative limit) is decided here only on live state,
    -- which a counter of the current eighth is.
    local marked = limit < 0
    if marked then
        limit = -limit
    end
    local latest = eighth(now, g)
    local expires = (latest + 9) * g
    -- Compared as text with the stored expiry: no number is parsed for it.
    local expires_text = format('%d', expires)
    local fresh_state, fresh_px = nil, nil
    for i = k + 1, k + r do
        local key, state = KEYS[i], states[i]
        if ahead then
            local written = ahead[key]
            if written == true then
                state = redis.call('GET', key)
            elseif written ~= nil then
                state = written
            end
        end
        if state then
            local stored_expires, version, first, rest = match(state, '^(%d+):(%d+):(%d+)(.*)$')
            if stored_expires ~= expires_text then
                return at, i - k - 1
            end
            local counted = first + 0
            local total = counted
            if rest ~= '' then
                -- Later eighths' counts: digits between colons, at most eight.
                if not match(rest, '^[:%d]*$') then
                    return at, i - k - 1
                end
                local count = fields(state, stored)
                if count > 11 then
                    return at, i - k - 1
                end
                for j = 4, count do
                    local c = stored[j]
                    if not c then
                        return at, i - k - 1
                    end
                    total = total + c
                end
            end
            if total + cost <= limit and cost > 0 then
                -- Only the latest eighth's count changes; the expiry is the
                -- same, so the key's TTL is kept.
                local offset = #stored_expires + #version + 2
                if counted % 10 + cost < 10 then
                    redis.call('SETRANGE', key, offset_text(offset + #first - 1), SLIDING_DIGIT[(counted + cost) % 10])
                    if ahead then
                        ahead[key] = true
                    end
                else
                    local text = format('%d', counted + cost)
                    if #text == #first then
                        redis.call('SETRANGE', key, offset_text(offset), text)
                        if ahead then
                            ahead[key] = true
                        end
                    else
                        local value = stored_expires .. ':' .. version .. ':' .. text .. rest
                        redis.call('SET', key, value, 'KEEPTTL')
                        if ahead then
                            ahead[key] = value
                        end
                    end
                end
            end
        elseif marked then
            return at, i - k - 1
        elseif cost <= limit then
            if not fresh_state then
                -- As `admit` and `keep` would write it: created now.
                fresh_state = format('%d:%d:%d', expires, now, cost)
                fresh_px = format('%d', ceil((expires - now) / 1000) + 1)
            end
            redis.call('SET', key, fresh_state, 'PX', fresh_px)
            if ahead then
                ahead[key] = fresh_state
            end
        end
        out[at + 1] = state or ''
        at = at + 1
    end
    return at, r
end
