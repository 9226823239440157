-- What a coalesced invocation (`coalesced.lua`) needs of fixed windows: the
-- arguments per key, and a lone check decided without the batch machinery.
local PER_KEY = 3
local match = string.match

-- A lone check, its arguments at ARGV[args + 1 ..]: decided as `admit_one`
-- decides it, its reply appended to `out` after `at`; returns where `out`
-- ends, or nil, changing nothing, for a state that is not two runs of
-- digits (the caller decides those through `admit`, as a single invocation
-- would). Members that share their arguments share their parsing, and a
-- count that keeps its number of digits is written in place (SETRANGE keeps
-- the TTL and answers with an integer).
local lone_args, lone_limit, lone_window, lone_cost = nil, 0, 0, 0
local function admit_lone(out, at, k, args)
    if args ~= lone_args then
        lone_args = args
        lone_limit, lone_window, lone_cost = tonumber(ARGV[args + 1]), tonumber(ARGV[args + 2]), tonumber(ARGV[args + 3])
    end
    local key, limit, cost = KEYS[k + 1], lone_limit, lone_cost
    local outcome, used, expires = 0, cost, now + lone_window
    local state = read(key)
    if state then
        -- One match and two coercions cost the server less than a find, two
        -- subs and two tonumber calls (each of which converts twice).
        local used_text, expires_text = match(state, '^(%d+):(%d+)$')
        if not used_text then
            return nil
        end
        local stored_used, stored_expires = used_text + 0, expires_text + 0
        if stored_expires > now then
            used, expires = stored_used + cost, stored_expires
            if used > limit then
                outcome, used = 1, stored_used
            else
                local text = format('%d', used)
                if #text == #used_text then
                    -- Sent as text: a number argument would be formatted as
                    -- a float.
                    redis.call('SETRANGE', key, '0', text)
                    ahead[key] = nil
                else
                    local value = text .. ':' .. expires_text
                    redis.call('SET', key, value, 'KEEPTTL')
                    ahead[key] = value
                end
            end
            out[at + 1], out[at + 2], out[at + 3], out[at + 4] = 3, outcome, used, expires
            return at + 4
        end
    end
    if cost > limit then
        outcome, used = 1, 0
    else
        keep(key, format('%d:%d', cost, expires), expires)
    end
    out[at + 1], out[at + 2], out[at + 3], out[at + 4] = 3, outcome, used, expires
    return at + 4
end
