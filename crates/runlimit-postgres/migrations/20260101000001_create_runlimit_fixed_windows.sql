-- Anchored fixed-window counters, one row per counter key
-- (policy fingerprint || subject key, 64 bytes).
CREATE TABLE runlimit_fixed_windows (
    counter_key bytea PRIMARY KEY CHECK (octet_length(counter_key) = 64),
    used bigint NOT NULL CHECK (used >= 0),
    window_expires_at timestamptz NOT NULL
);

CREATE INDEX runlimit_fixed_windows_expiry ON runlimit_fixed_windows (window_expires_at);
