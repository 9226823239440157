-- Several independent checks or batches ("members") sent together, each
-- decided on its own, all-or-nothing within itself, exactly as a single
-- invocation would decide it, against one reading of the clock. Follows the
-- algorithm's `*_coalesced.lua` (PER_KEY arguments per key; `admit_lones`,
-- when it has one, for lone checks). KEYS are every member's keys, in
-- order. ARGV[1] is 1 when a key occurs more than once (so writes are noted
-- for later members to read), else 0; then, member by member, a header and
-- arguments:
--   -r  r lone checks (r >= 1), one key each, sharing the PER_KEY arguments
--       that follow (members mostly share a policy and a cost);
--   n   a batch of n keys (n >= 1), its n * PER_KEY arguments following.
-- Every key's state is read first, with MGET.
-- Reply: one flat array, `now` and then, member by member, either the
-- length of its reply and the reply a single invocation would give, without
-- `now`, or the reply of `admit_lones`, a string (the state the check was
-- decided on). (A table per member costs the server more to send than its
-- decision.)

-- Appends a single invocation's `reply` to `out` after `at`; returns where
-- `out` ends.
local function append(out, at, reply)
    local length = #reply - 1
    out[at + 1] = length
    for i = 1, length do
        out[at + 1 + i] = reply[i]
    end
    return at + 1 + length
end

-- Calls `command` on `names` (unpacked), a thousand at a time (what Lua's
-- stack holds); `each(reply, first)` takes each reply.
local function in_chunks(command, names, each)
    local total = #names
    for first = 1, total, 1000 do
        local last = first + 999
        if last > total then
            last = total
        end
        each(redis.call(command, unpack(names, first, last)), first)
    end
end

-- The invocation: its members decided in order, into one flat reply. The
-- entry point (`coalesced_script.lua`) calls it.
local function coalesced()
    -- Every key's state, read before anything is written. MGET answers nil for
    -- a missing key and for a key of another type alike; if EXISTS finds any of
    -- those keys, GET fails on it as a single invocation's read would, before
    -- any member has written (so the invocation is refused having consumed
    -- nothing). Every nil that remains is a missing key.
    if #KEYS <= 1000 then
        states = redis.call('MGET', unpack(KEYS))
    else
        states = {}
        in_chunks('MGET', KEYS, function(reply, first)
            for i = 1, #reply do
                states[first + i - 1] = reply[i]
            end
        end)
    end
    local unread = {}
    for i = 1, #KEYS do
        if not states[i] then
            unread[#unread + 1] = KEYS[i]
        end
    end
    if #unread > 0 then
        in_chunks('EXISTS', unread, function(found)
            if found > 0 then
                for i = 1, #unread do
                    redis.call('GET', unread[i])
                end
            end
        end)
    end
    if ARGV[1] == '1' then
        ahead = {}
    end

    local replies, at = {now}, 1
    local k, a, arguments = 0, 1, #ARGV
    while a < arguments do
        local header = tonumber(ARGV[a + 1])
        if header < 0 then
            local first, last = k, k - header
            while first < last do
                if admit_lones then
                    local decided
                    at, decided = admit_lones(replies, at, first, a + 1, last - first)
                    first = first + decided
                end
                if first < last then
                    at = append(replies, at, admit(first, 1, a + 1))
                    first = first + 1
                end
            end
            k, a = last, a + 1 + PER_KEY
        else
            at = append(replies, at, admit(k, header, a + 1))
            k, a = k + header, a + 1 + header * PER_KEY
        end
    end
    return replies
end
