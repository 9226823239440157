-- Several independent checks or batches ("members") sent together, each
-- decided on its own, all-or-nothing within itself, exactly as a single
-- invocation would decide it, against one reading of the clock. Follows the
-- algorithm's `*_coalesced.lua` (PER_KEY arguments per key; `admit_lone`,
-- when it has one, for a lone check). KEYS are every member's keys, in
-- order. ARGV[1] is the number of members; then, member by member, a header
-- and the member's arguments:
--   '1'  a lone check, its PER_KEY arguments following;
--   '='  a lone check with the arguments of the lone check before it, which
--        are not sent again;
--   n    a batch of n keys, its arguments following.
-- Every key's state is read first, with MGET.
-- Reply: one flat array, `now` and then, member by member, the length of its
-- reply and the reply a single invocation would give, without `now`. (A
-- table per member costs the server more to send than its decision.)

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

-- Every key's state, one MGET per thousand keys (what Lua's stack holds).
-- MGET answers nil for a missing key and for a key of another type alike,
-- so neither is read ahead: `read` sends GET for them, which errors on the
-- other type, as a single invocation does.
ahead = {}
local total = #KEYS
for first = 1, total, 1000 do
    local last = first + 999
    if last > total then
        last = total
    end
    local states = redis.call('MGET', unpack(KEYS, first, last))
    for i = first, last do
        local state = states[i - first + 1]
        if state then
            ahead[KEYS[i]] = state
        end
    end
end

local members = tonumber(ARGV[1])
local replies, at = {now}, 1
local k, a, lone = 0, 1, 0
for _ = 1, members do
    local header = ARGV[a + 1]
    local keys = 1
    if header == '=' or header == '1' then
        if header == '1' then
            lone, a = a + 1, a + 1 + PER_KEY
        else
            a = a + 1
        end
        local ends = admit_lone and admit_lone(replies, at, k, lone)
        at = ends or append(replies, at, admit(k, 1, lone))
    else
        keys = tonumber(header)
        at = append(replies, at, admit(k, keys, a + 1))
        a = a + 1 + keys * PER_KEY
    end
    k = k + keys
end
return replies
