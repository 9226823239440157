-- Refunds of admissions of any algorithm (`AnyPolicy`), after the three
-- algorithms' refunds: ARGV for each key, the algorithm (1 fixed window, 2
-- sliding window, 3 GCRA), then its refund's arguments, padded with zeros
-- to six.
local CREDITS = {credit_fixed_window, credit_sliding_window, credit_gcra}
local PER_CREDIT = 7

local function credit(i, at)
    return CREDITS[tonumber(ARGV[at + 1])](i, at + 1)
end
