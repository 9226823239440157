-- A peek: Redis's clock and one counter's state, read together so the
-- client judges the state at the time it was read. Changes nothing.
-- KEYS[1]: the counter key. Replies: now_us, then the state (nil if absent).
local clock = redis.call('TIME')
return {clock[1] * 1000000 + clock[2], redis.call('GET', KEYS[1])}
