-- GCRA state: the theoretical arrival time as whole microseconds since the Unix
-- epoch plus a remainder in units of 1/quota microsecond, so replenishment is
-- exact. A row expires (its full burst has replenished) at `expires_at`.
CREATE TABLE runlimit_gcra (
    counter_key bytea PRIMARY KEY CHECK (octet_length(counter_key) = 64),
    tat_us bigint NOT NULL,
    tat_rem bigint NOT NULL CHECK (tat_rem >= 0),
    expires_at timestamptz NOT NULL,
    capacity_shard smallint GENERATED ALWAYS AS (get_byte(counter_key, 32)) STORED
) WITH (fillfactor = 80);

CREATE INDEX runlimit_gcra_expiry ON runlimit_gcra (expires_at);

INSERT INTO runlimit_capacity_ledger (counter_table, shard, used)
SELECT 'gcra', shard, 0 FROM generate_series(0, 255) AS shard;

CREATE TRIGGER runlimit_gcra_count_inserts
    AFTER INSERT ON runlimit_gcra
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION runlimit_ledger_count_inserts('gcra');

CREATE TRIGGER runlimit_gcra_count_deletes
    AFTER DELETE ON runlimit_gcra
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION runlimit_ledger_count_deletes('gcra');
