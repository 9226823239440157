-- Refunds of GCRA admissions: `credit_gcra(i, at)` gives back what a
-- receipt names for KEYS[i], its ARGV from at + 1: quota, increment_us,
-- increment_rem (the increment of the units given back: the whole cost, or
-- what a settlement returns), admitted_us, admitted_rem (the arrival time the admission
-- left), version (the counter's version at admission).
-- Credits what is left of the admission's own replenishment,
-- min(increment, admitted - now), from the current arrival time, while the
-- admission is still the latest (the stored arrival time and version are the
-- receipt's): an admission that later ones queued behind credits nothing, so
-- their increments never move earlier.
local stored = {0, 0, 0}

local function credit_gcra(i, at)
    local quota = tonumber(ARGV[at + 1])
    local inc_us, inc_rem = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
    local admitted_us, admitted_rem = tonumber(ARGV[at + 4]), tonumber(ARGV[at + 5])
    local version = tonumber(ARGV[at + 6])
    local credited = 0
    local state = redis.call('GET', KEYS[i])
    local count = state and fields(state, stored) or 0
    if count >= 2 then
        local t, r = stored[1], stored[2]
        local stored_version = count >= 3 and stored[3] or 0
        if t and r and stored_version == version
            and t == admitted_us and r == admitted_rem
            and (admitted_us > now or (admitted_us == now and admitted_rem > 0)) then
            local credit_us, credit_rem = admitted_us - now, admitted_rem
            if credit_us > inc_us or (credit_us == inc_us and credit_rem > inc_rem) then
                credit_us, credit_rem = inc_us, inc_rem
            end
            local nt, nr = t - credit_us, r - credit_rem
            if nr < 0 then
                nt, nr = nt - 1, nr + quota
            end
            local expires = nt
            if nr > 0 then
                expires = expires + 1
            end
            if expires > now then
                keep(KEYS[i], format('%d:%d:%d', nt, nr, stored_version), expires)
            else
                -- Fully replenished: worthless, as after expiry.
                redis.call('DEL', KEYS[i])
            end
            credited = 1
        end
    end
    return credited
end

-- What `refund_entry.lua` runs for each key.
local credit, PER_CREDIT = credit_gcra, 6
