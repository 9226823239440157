-- Prepended to every Runlimit script, after its prelude (`script.lua`, or
-- `library.lua` for the same code as a function library): what the scripts
-- of all three algorithms share.
--   * The clock: Redis's TIME, read once per invocation by the prelude or
--     the library's entry (`now`), in microseconds.
--   * Exactness: every integer stays below 2^53, where Lua's doubles are
--     exact (limits and costs are at most 1e9, times are microseconds since
--     the epoch); '%d' formats through a 64-bit integer, never in exponent
--     notation.
--   * State: a string of colon-separated integers per counter, read by
--     `fields` into a table the script reuses, written by `keep` with an
--     expiry, so Redis forgets a counter by itself once it is worthless.
--   * The batch rule (`all_or_nothing`): every check is decided before
--     anything is written, and nothing is written unless every check is
--     allowed.
-- The server's script engine, not the arithmetic, dominates the cost of a
-- check, so the scripts avoid pattern matching, global lookups and table
-- growth for the common single check.
--   * Coalesced invocations (`coalesced.lua`) read every stored key's state
--     with MGET first (into `states`); `read` answers from it, and every
--     write is noted in `ahead`, so two members with one key see each
--     other's writes.
--   * Grants (`grant.lua`): a first pass of `admit` only measures the room
--     a counter has (`probing`: it records `room` and denies, so nothing is
--     written), then a second admits the units granted (`granting`), in the
--     same atomic script. Admissions leave both unset.
-- These and `states`, `ahead` below hold for one invocation: a function
-- library's entry (`library_entry.lua`) resets every one of them per call.
local probing, granting, room = false, nil, 0

-- In a coalesced invocation: the states read before anything is written,
-- by key index (false for a missing key), and, when a key occurs more than
-- once, the states written since, by key (the stored string, or true for
-- one changed in place). Nil otherwise.
local states, ahead = nil, nil

-- The state stored at KEYS[i]: as read ahead or written since, or read now
-- (with GET, which errors on a key of another type).
local function read(i)
    local key, state = KEYS[i], states and states[i]
    if ahead then
        local written = ahead[key]
        if written ~= nil then
            state = written
        end
    end
    if state == nil or state == true then
        return redis.call('GET', key)
    end
    return state
end

-- The integers of `state` ("a:b:c") into `into`, in order; returns how many.
-- A field that is not an integer reads as nil.
local function fields(state, into)
    local count, start = 0, 1
    while true do
        local stop = find(state, ':', start, true)
        count = count + 1
        into[count] = tonumber(sub(state, start, stop and stop - 1 or nil))
        if not stop then
            return count
        end
        start = stop + 1
    end
end

-- Stores `value` at `key` until `expires` (microseconds on Redis's clock).
-- The relative expiry in whole milliseconds stays below 1e14, so Lua passes
-- it as an exact integer; the extra millisecond keeps the key from expiring
-- early when the server's own millisecond clock lags TIME.
local function keep(key, value, expires)
    -- Passed as text: Redis would format a Lua number with '%.17g'.
    redis.call('SET', key, value, 'PX', format('%d', ceil((expires - now) / 1000) + 1))
    if ahead then
        ahead[key] = value
    end
end

-- The batch rule: `decide(i)` for every check, true when allowed; then, only
-- if every one was, `write(i)` for each.
local function all_or_nothing(n, decide, write)
    local allowed = true
    for i = 1, n do
        if not decide(i) then
            allowed = false
        end
    end
    if allowed then
        for i = 1, n do
            write(i)
        end
    end
end
