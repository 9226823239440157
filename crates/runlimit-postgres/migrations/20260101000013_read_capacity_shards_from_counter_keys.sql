-- Counter rows no longer store their capacity shard: the ledger triggers and
-- cleanup read it from the counter key (its byte 32, the subject key's first
-- byte), as the admission functions always have.
--
-- A stored generated column is computed when a row is written, and
-- PostgreSQL 15 reads its expression back from the catalog and plans it on
-- every execution of every statement that updates the table, although no
-- update changes the key it is computed from: 1.5% of the server's time in a
-- profile of batches of two, paid by every admission. Dropping the columns
-- changes only the catalog. The triggers and cleanup are replaced in the
-- same transaction, so the ledger stays exact.

CREATE OR REPLACE FUNCTION runlimit_ledger_count_inserts() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE runlimit_capacity_ledger AS ledger
    SET used = ledger.used + added.rows
    FROM (
        SELECT pg_catalog.get_byte(inserted.counter_key, 32) AS shard, count(*)::integer AS rows
        FROM inserted GROUP BY 1
    ) AS added
    WHERE ledger.counter_table = TG_ARGV[0] AND ledger.shard = added.shard;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION runlimit_ledger_count_deletes() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE runlimit_capacity_ledger AS ledger
    SET used = ledger.used - removed.rows
    FROM (
        SELECT pg_catalog.get_byte(deleted.counter_key, 32) AS shard, count(*)::integer AS rows
        FROM deleted GROUP BY 1
    ) AS removed
    WHERE ledger.counter_table = TG_ARGV[0] AND ledger.shard = removed.shard;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION runlimit_cleanup_counters(
    p_counter_table text,
    p_expiry_column text,
    p_max_rows integer,
    p_lock_timeout_ms integer
) RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_table text := 'runlimit_' || p_counter_table;
    v_keys bytea[];
    v_shards smallint[];
    v_removed bigint;
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    EXECUTE pg_catalog.format(
        'SELECT pg_catalog.array_agg(doomed.counter_key),
                pg_catalog.array_agg(DISTINCT pg_catalog.get_byte(doomed.counter_key, 32)::smallint)
         FROM (
             SELECT c.counter_key FROM %1$I AS c
             WHERE c.%2$I <= $1 ORDER BY c.%2$I LIMIT $2 FOR UPDATE SKIP LOCKED
         ) AS doomed',
        v_table, p_expiry_column)
    INTO v_keys, v_shards
    USING v_now, p_max_rows;
    IF v_keys IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM 1 FROM runlimit_capacity_ledger AS ledger
    WHERE ledger.counter_table = p_counter_table AND ledger.shard = ANY (v_shards)
    ORDER BY ledger.shard
    FOR UPDATE;
    EXECUTE pg_catalog.format('DELETE FROM %I AS c WHERE c.counter_key = ANY ($1)', v_table)
    USING v_keys;
    GET DIAGNOSTICS v_removed = ROW_COUNT;
    RETURN v_removed;
END;
$$;

ALTER TABLE runlimit_fixed_windows DROP COLUMN capacity_shard;
ALTER TABLE runlimit_gcra DROP COLUMN capacity_shard;
ALTER TABLE runlimit_sliding_windows DROP COLUMN capacity_shard;
