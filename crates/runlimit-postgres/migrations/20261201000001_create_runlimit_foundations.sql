-- What every counter table shares: the domains of its checked columns, the
-- capacity ledger with its triggers, and the steps every counter function
-- runs (the transaction prologue, the capacity rule for new rows, cleanup and
-- reset). The counter tables and their functions follow in one migration per
-- algorithm: fixed windows, GCRA, sliding windows.
--
-- Server-side admission and maintenance: every check, batch, refund or reset
-- is one statement, so one round trip, whatever the batch size. Each
-- function:
--   * sets lock_timeout (and, when asked, synchronous_commit = off) for its own
--     transaction only;
--   * takes transaction-scoped advisory locks on the counters in ascending id
--     order, then row locks, then capacity-ledger rows in ascending shard order,
--     so concurrent admissions and cleanups cannot deadlock;
--   * samples pg_catalog.clock_timestamp() once, schema-qualified so no function
--     on a caller's search_path can stand in for the clock;
--   * decides every check before changing anything, and changes nothing unless
--     every check is allowed.
-- Outcomes: 0 allowed, 1 quota exceeded, 2 storage capacity.
--
-- Every function pins its search_path to the one the migrations ran with
-- (SET search_path FROM CURRENT), so it resolves Runlimit's tables and
-- functions in the schema they were installed in, whatever its caller's
-- search_path.

-- The counter tables' column checks are domains rather than table CHECK
-- constraints. PostgreSQL 15 checks a table's CHECK constraints on every row
-- an UPDATE writes, and on every execution of the statement it first reads
-- each constraint's expression back from the catalog and plans it: about
-- 32,000 instructions per statement for the two constraints of
-- `runlimit_fixed_windows`, a sixth of a single check's in-place `UPDATE`
-- (counted with callgrind, BENCHMARKS.md), although the update never changes
-- the key and only ever adds to the count. A domain's check is taken from the
-- connection's type cache and runs only when a value is assigned to a column of
-- that type: the key's on insert, the counts' on every write of them.
CREATE DOMAIN runlimit_counter_key AS bytea
    CONSTRAINT runlimit_counter_key_length CHECK (pg_catalog.octet_length(VALUE) = 64);
CREATE DOMAIN runlimit_nonnegative_bigint AS bigint
    CONSTRAINT runlimit_nonnegative_bigint_check CHECK (VALUE >= 0);
CREATE DOMAIN runlimit_sliding_counts AS bigint[]
    CONSTRAINT runlimit_sliding_counts_cardinality CHECK (pg_catalog.cardinality(VALUE) = 9);

-- Hard-bound stored cardinality: 256 capacity shards per counter table, chosen
-- by the first byte of the subject key (byte 32 of the counter key), each
-- counted in a ledger that statement-level triggers keep exact. The ledger's
-- CHECK caps every shard at 65,536 rows even for writers that do not know
-- about the configured (lower) maximum. Each counter table's migration inserts
-- its 256 ledger rows.
CREATE TABLE runlimit_capacity_ledger (
    counter_table text NOT NULL,
    shard smallint NOT NULL CHECK (shard BETWEEN 0 AND 255),
    used integer NOT NULL DEFAULT 0 CHECK (used BETWEEN 0 AND 65536),
    PRIMARY KEY (counter_table, shard)
);

-- Every counter table carries three ledger triggers: inserts, deletes and
-- truncation, each naming its ledger rows by the trigger argument.
--
-- Counter rows do not store their capacity shard: the ledger triggers and
-- cleanup read it from the counter key (its byte 32, the subject key's first
-- byte), as the admission functions do. A stored generated column would be
-- computed when a row is written, and PostgreSQL 15 reads its expression
-- back from the catalog and plans it on every execution of every statement
-- that updates the table, although no update changes the key it is computed
-- from: 1.5% of the server's time in a profile of batches of two, paid by
-- every admission.
CREATE FUNCTION runlimit_ledger_count_inserts() RETURNS trigger
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

CREATE FUNCTION runlimit_ledger_count_deletes() RETURNS trigger
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

-- TRUNCATE fires no row triggers, so without this the capacity ledger would
-- keep counting rows that no longer exist: a truncated table would deny every
-- new key in a shard that was full, and cleanup could never free it.
-- A statement-level TRUNCATE trigger zeroes the table's ledger rows instead.
-- TRUNCATE holds the table exclusively, so no admission can insert or delete
-- a row of it between the truncation and this update.
CREATE FUNCTION runlimit_ledger_count_truncate() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE runlimit_capacity_ledger AS ledger
    SET used = 0
    WHERE ledger.counter_table = TG_ARGV[0] AND ledger.used <> 0;
    RETURN NULL;
END;
$$;

-- The prologue of every admission, refund and reset: settings for this
-- transaction only, the counters' advisory locks in the order the client
-- sorted them (ascending, deduplicated), then one sample of
-- pg_catalog.clock_timestamp(), schema-qualified so no function on a caller's
-- search_path can stand in for the clock. Returns the sample in microseconds
-- since the Unix epoch.
CREATE FUNCTION runlimit_begin(
    p_lock_ids bigint[],
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    IF p_relaxed_durability THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(ids.lock_id)
    FROM pg_catalog.unnest(p_lock_ids) WITH ORDINALITY AS ids(lock_id, position)
    ORDER BY ids.position;
    RETURN (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000000)::bigint;
END;
$$;

-- Capacity for new counters: locks the ledger rows of the shards the new keys
-- (p_new[i]) fall in, in ascending shard order, and returns for each key
-- whether it is refused because its shard is full. Within a shard, keys earlier
-- in the batch take the remaining room first.
CREATE FUNCTION runlimit_refuse_beyond_capacity(
    p_counter_table text,
    p_keys bytea[],
    p_new boolean[],
    p_max_rows_per_shard integer
) RETURNS boolean[]
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_refused boolean[] := pg_catalog.array_fill(false, ARRAY[pg_catalog.cardinality(p_keys)]);
    v_shard smallint;
    v_needed integer;
    v_headroom integer;
    i integer;
BEGIN
    FOR v_shard, v_needed IN
        SELECT pg_catalog.get_byte(p_keys[k], 32)::smallint, count(*)::integer
        FROM pg_catalog.generate_subscripts(p_keys, 1) AS k
        WHERE p_new[k]
        GROUP BY 1
        ORDER BY 1
    LOOP
        SELECT ledger.used INTO v_headroom
        FROM runlimit_capacity_ledger AS ledger
        WHERE ledger.counter_table = p_counter_table AND ledger.shard = v_shard
        FOR UPDATE;
        v_headroom := p_max_rows_per_shard - v_headroom;
        IF v_headroom < v_needed THEN
            FOR i IN 1..pg_catalog.cardinality(p_keys) LOOP
                IF p_new[i] AND pg_catalog.get_byte(p_keys[i], 32) = v_shard THEN
                    IF v_headroom > 0 THEN
                        v_headroom := v_headroom - 1;
                    ELSE
                        v_refused[i] := true;
                    END IF;
                END IF;
            END LOOP;
        END IF;
    END LOOP;
    RETURN v_refused;
END;
$$;

-- The batch rule for new rows: a check that would be allowed (outcome 0) but
-- needs a new row in a full capacity shard is refused for capacity (outcome 2).
-- Returns the outcomes with those refusals; ledger rows are locked in
-- ascending shard order (see runlimit_refuse_beyond_capacity).
CREATE FUNCTION runlimit_claim_capacity(
    p_counter_table text,
    p_keys bytea[],
    p_exists boolean[],
    p_outcomes smallint[],
    p_max_rows_per_shard integer
) RETURNS smallint[]
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_outcomes smallint[] := p_outcomes;
    v_new boolean[] := '{}';
    v_refused boolean[];
    i integer;
BEGIN
    FOR i IN 1..pg_catalog.cardinality(p_keys) LOOP
        v_new[i] := NOT p_exists[i] AND p_outcomes[i] = 0;
    END LOOP;
    IF true = ANY (v_new) THEN
        v_refused := runlimit_refuse_beyond_capacity(p_counter_table, p_keys, v_new, p_max_rows_per_shard);
        FOR i IN 1..pg_catalog.cardinality(p_keys) LOOP
            IF v_refused[i] THEN
                v_outcomes[i] := 2;
            END IF;
        END LOOP;
    END IF;
    RETURN v_outcomes;
END;
$$;

-- Bounded maintenance of any counter table: deletes at most p_max_rows rows
-- whose expiry column has passed, oldest first, skipping rows an admission
-- holds. One clock sample keeps the predicate an index range condition.
-- Ledger rows are locked in shard order before the delete so cleanup and
-- admissions never wait on each other in a cycle.
CREATE FUNCTION runlimit_cleanup_counters(
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

-- Resets of any counter table: delete the counter (freeing its ledger slot
-- through the delete trigger) and report whether it was live. The advisory
-- lock orders a reset with admissions of the same counter.
CREATE FUNCTION runlimit_reset_counter(
    p_counter_table text,
    p_expiry_column text,
    p_key bytea,
    p_lock_id bigint,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now_us bigint := runlimit_begin(ARRAY[p_lock_id], p_lock_timeout_ms, p_relaxed_durability);
    v_live boolean;
BEGIN
    EXECUTE pg_catalog.format(
        'DELETE FROM %I AS c WHERE c.counter_key = $1 RETURNING c.%I > $2',
        'runlimit_' || p_counter_table, p_expiry_column)
    INTO v_live
    USING p_key, 'epoch'::timestamptz + v_now_us * interval '1 microsecond';
    RETURN coalesce(v_live, false);
END;
$$;
