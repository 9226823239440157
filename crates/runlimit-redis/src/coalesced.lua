-- Several independent checks or batches ("members") sent together, each
-- decided by `admit` on its own, all-or-nothing within itself, against one
-- reading of the clock. ARGV[1] is the number of members m; ARGV[2j] and
-- ARGV[2j + 1] member j's key and argument counts; then every member's
-- arguments, in order. KEYS are every member's keys, in order.
-- Replies: one reply per member, as a single invocation would give it.
local members = tonumber(ARGV[1])
local replies = {}
local k, a = 0, 1 + 2 * members
for j = 1, members do
    local keys, arguments = tonumber(ARGV[2 * j]), tonumber(ARGV[2 * j + 1])
    replies[j] = admit(k, keys, a)
    k, a = k + keys, a + arguments
end
return replies
