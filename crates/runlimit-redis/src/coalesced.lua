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
-- `now`, or the compact reply of `admit_lones`, whose first value is
-- negative. (A table per member costs the server more to send than its
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

-- Every key's state, one MGET per thousand keys (what Lua's stack holds).
local total = #KEYS
if total <= 1000 then
    states = redis.call('MGET', unpack(KEYS))
else
    states = {}
    for first = 1, total, 1000 do
        local last = first + 999
        if last > total then
            last = total
        end
        local read_ahead = redis.call('MGET', unpack(KEYS, first, last))
        for i = first, last do
            states[i] = read_ahead[i - first + 1]
        end
    end
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
