-- A receipt's refund, one atomic script: the algorithm's `credit` for each
-- key, its PER_CREDIT arguments in order.
-- Replies: for each key 1 if credited, else 0.
local reply = {}
for i = 1, #KEYS do
    reply[i] = credit(i, PER_CREDIT * (i - 1))
end
return reply
