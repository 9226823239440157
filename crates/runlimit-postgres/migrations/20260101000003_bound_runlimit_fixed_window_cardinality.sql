-- Hard-bound stored cardinality: 256 capacity shards, chosen by the first byte
-- of the subject key, each counted in a ledger that statement-level triggers keep
-- exact. The ledger's CHECK caps every shard at 65,536 rows even for writers
-- that do not know about the configured (lower) maximum.
CREATE TABLE runlimit_capacity_ledger (
    counter_table text NOT NULL,
    shard smallint NOT NULL CHECK (shard BETWEEN 0 AND 255),
    used integer NOT NULL DEFAULT 0 CHECK (used BETWEEN 0 AND 65536),
    PRIMARY KEY (counter_table, shard)
);

ALTER TABLE runlimit_fixed_windows
    ADD COLUMN capacity_shard smallint
    GENERATED ALWAYS AS (get_byte(counter_key, 32)) STORED;

INSERT INTO runlimit_capacity_ledger (counter_table, shard, used)
SELECT 'fixed_windows', shard, 0 FROM generate_series(0, 255) AS shard;

UPDATE runlimit_capacity_ledger AS ledger
SET used = counted.rows
FROM (
    SELECT capacity_shard, count(*)::integer AS rows
    FROM runlimit_fixed_windows
    GROUP BY capacity_shard
) AS counted
WHERE ledger.counter_table = 'fixed_windows' AND ledger.shard = counted.capacity_shard;

-- Shared by every counter table: the trigger argument names the ledger rows.
CREATE FUNCTION runlimit_ledger_count_inserts() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE runlimit_capacity_ledger AS ledger
    SET used = ledger.used + added.rows
    FROM (SELECT capacity_shard, count(*)::integer AS rows FROM inserted GROUP BY capacity_shard) AS added
    WHERE ledger.counter_table = TG_ARGV[0] AND ledger.shard = added.capacity_shard;
    RETURN NULL;
END;
$$;

CREATE FUNCTION runlimit_ledger_count_deletes() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE runlimit_capacity_ledger AS ledger
    SET used = ledger.used - removed.rows
    FROM (SELECT capacity_shard, count(*)::integer AS rows FROM deleted GROUP BY capacity_shard) AS removed
    WHERE ledger.counter_table = TG_ARGV[0] AND ledger.shard = removed.capacity_shard;
    RETURN NULL;
END;
$$;

CREATE TRIGGER runlimit_fixed_windows_count_inserts
    AFTER INSERT ON runlimit_fixed_windows
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION runlimit_ledger_count_inserts('fixed_windows');

CREATE TRIGGER runlimit_fixed_windows_count_deletes
    AFTER DELETE ON runlimit_fixed_windows
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION runlimit_ledger_count_deletes('fixed_windows');
