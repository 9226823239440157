-- A peek of a counter that may carry another's state: Redis's clock and the
-- states of the counter and of its sources in its slot, read together.
-- Changes nothing. KEYS[1]: the counter key; then the sources' keys.
-- Replies: now_us, then the states, in KEYS' order (nil where absent).
return {now, redis.call('MGET', unpack(KEYS))}
