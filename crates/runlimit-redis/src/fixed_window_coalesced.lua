-- What a coalesced invocation (`coalesced.lua`) needs of fixed windows: the
-- arguments per key, and runs of lone checks decided without the batch
-- machinery. A C function call, a formatted number or a reply integer each
-- cost the server about as much as a dozen Lua operations, so a decision
-- here makes as few of them as it can.
local PER_KEY = 3

-- SETRANGE's offset of a count's last digit (by the count's number of
-- digits) and the digits, as strings the script holds already.
local LAST = {'0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}
local DIGIT = {[0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}

-- Up to `r` lone checks of KEYS[k + 1 .. k + r] sharing the arguments at
-- ARGV[a + 1 ..], each decided as `admit_one` decides it, their replies
-- appended to `out` after `at`; returns where `out` ends and how many it
-- decided. It stops, changing nothing, at a state that is not two runs of
-- digits, which the caller decides through `admit`, as a single invocation
-- would. A check's reply is the state it was decided on, as read ('' for
-- none): the client, which sent the arguments, decides from it as this loop
-- does, and one string costs the server less than the integers of a
-- decision.
local function admit_lones(out, at, k, a, r)
    local limit, window, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    -- The most a new window admits: nothing for a marked run (a negative
    -- window), whose checks without a live window carry first.
    local fresh_limit = window > 0 and limit or -1
    -- A new window's state and expiry, formatted when a check first needs them.
    local fresh_state, fresh_px = nil, nil
    for i = k + 1, k + r do
        -- `read(i)`, inlined: the call costs 3% of a coalesced check.
        local key, state = KEYS[i], states[i]
        if ahead then
            local written = ahead[key]
            if written == true then
                state = redis.call('GET', key)
            elseif written ~= nil then
                state = written
            end
        end
        local used_text, expires_text
        if state then
            used_text, expires_text = match(state, '^(%d+):(%d+)$')
        end
        if state and not used_text then
            return at, i - k - 1
        end
        if expires_text and expires_text + 0 > now then
            local stored_used = used_text + 0
            local used, last = stored_used + cost, LAST[#used_text]
            if used > limit then
                -- Denied: nothing changes.
            elseif last and stored_used % 10 + cost < 10 then
                -- Only the last digit changes. SETRANGE keeps the TTL.
                redis.call('SETRANGE', key, last, DIGIT[used % 10])
                if ahead then
                    ahead[key] = true
                end
            else
                local text = format('%d', used)
                if #text == #used_text then
                    redis.call('SETRANGE', key, '0', text)
                    if ahead then
                        ahead[key] = true
                    end
                else
                    local value = text .. ':' .. expires_text
                    redis.call('SET', key, value, 'KEEPTTL')
                    if ahead then
                        ahead[key] = value
                    end
                end
            end
        elseif cost <= fresh_limit then
            if not fresh_state then
                -- As `keep` would write it.
                fresh_state = format('%d:%d', cost, now + window)
                fresh_px = format('%d', ceil(window / 1000) + 1)
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
