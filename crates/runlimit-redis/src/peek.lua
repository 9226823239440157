-- A peek: Redis's clock and one counter's state, read together so the
-- client judges the state at the time it was read. Changes nothing.
-- KEYS[1]: the counter key. Replies: now_us, then the state (nil if absent).
return {now, redis.call('GET', KEYS[1])}
