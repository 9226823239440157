-- Sliding windows, and the steps every counter function shares.
--
-- Until now each function of each algorithm carried its own copy of the
-- transaction prologue (lock_timeout, durability, advisory locks in order, the
-- clock sample), of the capacity rule for new rows, of cleanup and of reset.
-- They are functions of their own here, and the fixed-window and GCRA
-- functions are redefined over them (same signatures and results, so running
-- replicas are unaffected), before the sliding-window functions use them too.

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
        'SELECT pg_catalog.array_agg(doomed.counter_key), pg_catalog.array_agg(DISTINCT doomed.capacity_shard)
         FROM (
             SELECT c.counter_key, c.capacity_shard FROM %1$I AS c
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

-- Fixed windows and GCRA over the shared steps.

CREATE OR REPLACE FUNCTION runlimit_check_fixed_windows(
    p_keys bytea[],
    p_lock_ids bigint[],
    p_limits bigint[],
    p_window_us bigint[],
    p_costs bigint[],
    p_max_rows_per_shard integer,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS TABLE (r_index integer, r_outcome smallint, r_used bigint, r_expires_us bigint, r_now_us bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_count integer := pg_catalog.cardinality(p_keys);
    v_now_us bigint;
    v_now timestamptz;
    v_used bigint[] := '{}';
    v_expires timestamptz[] := '{}';
    v_exists boolean[] := '{}';
    v_outcome smallint[] := '{}';
    v_row record;
    i integer;
BEGIN
    v_now_us := runlimit_begin(p_lock_ids, p_lock_timeout_ms, p_relaxed_durability);
    v_now := 'epoch'::timestamptz + v_now_us * interval '1 microsecond';

    FOR i IN 1..v_count LOOP
        SELECT w.used, w.window_expires_at INTO v_row
        FROM runlimit_fixed_windows AS w
        WHERE w.counter_key = p_keys[i]
        FOR UPDATE;
        v_exists[i] := FOUND;
        IF FOUND AND v_row.window_expires_at > v_now THEN
            v_used[i] := v_row.used;
            v_expires[i] := v_row.window_expires_at;
        ELSE
            -- No window, or an expired one: the next allowed check anchors anew.
            v_used[i] := 0;
            v_expires[i] := v_now + p_window_us[i] * interval '1 microsecond';
        END IF;
        IF v_used[i] + p_costs[i] <= p_limits[i] THEN
            v_outcome[i] := 0;
            v_used[i] := v_used[i] + p_costs[i];
        ELSE
            v_outcome[i] := 1;
        END IF;
    END LOOP;

    v_outcome := runlimit_claim_capacity('fixed_windows', p_keys, v_exists, v_outcome, p_max_rows_per_shard);

    IF 0 = ALL (v_outcome) THEN
        FOR i IN 1..v_count LOOP
            IF v_exists[i] THEN
                UPDATE runlimit_fixed_windows AS w
                SET used = v_used[i], window_expires_at = v_expires[i]
                WHERE w.counter_key = p_keys[i];
            ELSE
                INSERT INTO runlimit_fixed_windows (counter_key, used, window_expires_at)
                VALUES (p_keys[i], v_used[i], v_expires[i]);
            END IF;
        END LOOP;
    END IF;

    FOR i IN 1..v_count LOOP
        r_index := i;
        r_outcome := v_outcome[i];
        r_used := v_used[i];
        r_expires_us := (EXTRACT(EPOCH FROM v_expires[i]) * 1000000)::bigint;
        r_now_us := v_now_us;
        RETURN NEXT;
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION runlimit_check_gcra(
    p_keys bytea[],
    p_lock_ids bigint[],
    p_quotas bigint[],
    p_increment_us bigint[],
    p_increment_rem bigint[],
    p_tolerance_us bigint[],
    p_tolerance_rem bigint[],
    p_max_rows_per_shard integer,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS TABLE (
    r_index integer,
    r_outcome smallint,
    r_ahead_us bigint,
    r_ahead_rem bigint,
    r_now_us bigint,
    r_version bigint
)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_count integer := pg_catalog.cardinality(p_keys);
    v_now_us bigint;
    v_tat_us bigint[] := '{}';
    v_tat_rem bigint[] := '{}';
    v_ahead_us bigint[] := '{}';
    v_ahead_rem bigint[] := '{}';
    v_exists boolean[] := '{}';
    v_version bigint[] := '{}';
    v_outcome smallint[] := '{}';
    v_row record;
    v_base_us bigint;
    v_base_rem bigint;
    i integer;
BEGIN
    v_now_us := runlimit_begin(p_lock_ids, p_lock_timeout_ms, p_relaxed_durability);

    FOR i IN 1..v_count LOOP
        SELECT g.tat_us, g.tat_rem, g.version INTO v_row
        FROM runlimit_gcra AS g
        WHERE g.counter_key = p_keys[i]
        FOR UPDATE;
        v_exists[i] := FOUND;
        -- A new row's version is its creation time.
        v_version[i] := CASE WHEN FOUND THEN v_row.version ELSE v_now_us END;
        -- start = max(stored arrival time, now)
        IF FOUND AND (v_row.tat_us > v_now_us OR (v_row.tat_us = v_now_us AND v_row.tat_rem > 0)) THEN
            v_base_us := v_row.tat_us;
            v_base_rem := v_row.tat_rem;
        ELSE
            v_base_us := v_now_us;
            v_base_rem := 0;
        END IF;
        v_tat_us[i] := v_base_us + p_increment_us[i];
        v_tat_rem[i] := v_base_rem + p_increment_rem[i];
        IF v_tat_rem[i] >= p_quotas[i] THEN
            v_tat_us[i] := v_tat_us[i] + 1;
            v_tat_rem[i] := v_tat_rem[i] - p_quotas[i];
        END IF;
        v_ahead_us[i] := v_tat_us[i] - v_now_us;
        v_ahead_rem[i] := v_tat_rem[i];
        IF v_ahead_us[i] > p_tolerance_us[i]
            OR (v_ahead_us[i] = p_tolerance_us[i] AND v_ahead_rem[i] > p_tolerance_rem[i]) THEN
            v_outcome[i] := 1;
        ELSE
            v_outcome[i] := 0;
        END IF;
    END LOOP;

    v_outcome := runlimit_claim_capacity('gcra', p_keys, v_exists, v_outcome, p_max_rows_per_shard);

    IF 0 = ALL (v_outcome) THEN
        FOR i IN 1..v_count LOOP
            IF v_exists[i] THEN
                UPDATE runlimit_gcra AS g
                SET tat_us = v_tat_us[i],
                    tat_rem = v_tat_rem[i],
                    expires_at = 'epoch'::timestamptz
                        + (v_tat_us[i] + (v_tat_rem[i] > 0)::integer) * interval '1 microsecond'
                WHERE g.counter_key = p_keys[i];
            ELSE
                INSERT INTO runlimit_gcra (counter_key, tat_us, tat_rem, expires_at, version)
                VALUES (p_keys[i], v_tat_us[i], v_tat_rem[i],
                    'epoch'::timestamptz
                        + (v_tat_us[i] + (v_tat_rem[i] > 0)::integer) * interval '1 microsecond',
                    v_version[i]);
            END IF;
        END LOOP;
    END IF;

    FOR i IN 1..v_count LOOP
        r_index := i;
        r_outcome := v_outcome[i];
        r_ahead_us := v_ahead_us[i];
        r_ahead_rem := v_ahead_rem[i];
        r_now_us := v_now_us;
        r_version := v_version[i];
        RETURN NEXT;
    END LOOP;
END;
$$;

-- The refund rules are those of 20260101000007_create_runlimit_lifecycle_functions.sql.
CREATE OR REPLACE FUNCTION runlimit_refund_fixed_windows(
    p_keys bytea[],
    p_lock_ids bigint[],
    p_costs bigint[],
    p_expires_us bigint[],
    p_used_after bigint[],
    p_window_us bigint[],
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS TABLE (r_index integer, r_credited boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now timestamptz;
    v_row record;
    i integer;
BEGIN
    v_now := 'epoch'::timestamptz
        + runlimit_begin(p_lock_ids, p_lock_timeout_ms, p_relaxed_durability) * interval '1 microsecond';

    FOR i IN 1..pg_catalog.cardinality(p_keys) LOOP
        SELECT w.used, w.window_expires_at INTO v_row
        FROM runlimit_fixed_windows AS w
        WHERE w.counter_key = p_keys[i]
        FOR UPDATE;
        r_index := i;
        r_credited := FOUND
            AND v_row.window_expires_at > v_now
            AND v_row.used > 0
            AND (EXTRACT(EPOCH FROM v_row.window_expires_at) * 1000000)::bigint = p_expires_us[i];
        IF r_credited THEN
            UPDATE runlimit_fixed_windows AS w
            SET used = CASE WHEN v_row.used <= p_costs[i] THEN 0 ELSE v_row.used - p_costs[i] END,
                window_expires_at = CASE
                    WHEN v_row.used <= p_costs[i] THEN v_now
                    WHEN p_used_after[i] = p_costs[i] THEN GREATEST(
                        v_now + p_window_us[i] * interval '1 microsecond', v_row.window_expires_at)
                    ELSE v_row.window_expires_at
                END
            WHERE w.counter_key = p_keys[i];
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION runlimit_refund_gcra(
    p_keys bytea[],
    p_lock_ids bigint[],
    p_quotas bigint[],
    p_increment_us bigint[],
    p_increment_rem bigint[],
    p_admitted_us bigint[],
    p_admitted_rem bigint[],
    p_versions bigint[],
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS TABLE (r_index integer, r_credited boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now_us bigint;
    v_row record;
    v_credit_us bigint;
    v_credit_rem bigint;
    v_tat_us bigint;
    v_tat_rem bigint;
    i integer;
BEGIN
    v_now_us := runlimit_begin(p_lock_ids, p_lock_timeout_ms, p_relaxed_durability);

    FOR i IN 1..pg_catalog.cardinality(p_keys) LOOP
        SELECT g.tat_us, g.tat_rem, g.version INTO v_row
        FROM runlimit_gcra AS g
        WHERE g.counter_key = p_keys[i]
        FOR UPDATE;
        r_index := i;
        r_credited := false;
        IF FOUND AND v_row.version = p_versions[i] THEN
            -- credit = admitted - now (zero once passed), at most the increment.
            IF p_admitted_us[i] > v_now_us OR (p_admitted_us[i] = v_now_us AND p_admitted_rem[i] > 0) THEN
                v_credit_us := p_admitted_us[i] - v_now_us;
                v_credit_rem := p_admitted_rem[i];
                IF v_credit_us > p_increment_us[i]
                    OR (v_credit_us = p_increment_us[i] AND v_credit_rem > p_increment_rem[i]) THEN
                    v_credit_us := p_increment_us[i];
                    v_credit_rem := p_increment_rem[i];
                END IF;
                v_tat_us := v_row.tat_us - v_credit_us;
                v_tat_rem := v_row.tat_rem - v_credit_rem;
                IF v_tat_rem < 0 THEN
                    v_tat_us := v_tat_us - 1;
                    v_tat_rem := v_tat_rem + p_quotas[i];
                END IF;
                UPDATE runlimit_gcra AS g
                SET tat_us = v_tat_us,
                    tat_rem = v_tat_rem,
                    version = CASE
                        WHEN v_row.tat_us = p_admitted_us[i] AND v_row.tat_rem = p_admitted_rem[i]
                            THEN v_row.version
                        ELSE v_row.version + 1
                    END,
                    expires_at = 'epoch'::timestamptz
                        + (v_tat_us + (v_tat_rem > 0)::integer) * interval '1 microsecond'
                WHERE g.counter_key = p_keys[i];
                r_credited := true;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION runlimit_reset_fixed_windows(
    p_key bytea,
    p_lock_id bigint,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS boolean
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT runlimit_reset_counter('fixed_windows', 'window_expires_at', p_key, p_lock_id,
        p_lock_timeout_ms, p_relaxed_durability);
$$;

CREATE OR REPLACE FUNCTION runlimit_reset_gcra(
    p_key bytea,
    p_lock_id bigint,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS boolean
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT runlimit_reset_counter('gcra', 'expires_at', p_key, p_lock_id,
        p_lock_timeout_ms, p_relaxed_durability);
$$;

CREATE OR REPLACE FUNCTION runlimit_cleanup_fixed_windows(p_max_rows integer, p_lock_timeout_ms integer)
RETURNS bigint
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT runlimit_cleanup_counters('fixed_windows', 'window_expires_at', p_max_rows, p_lock_timeout_ms);
$$;

CREATE OR REPLACE FUNCTION runlimit_cleanup_gcra(p_max_rows integer, p_lock_timeout_ms integer)
RETURNS bigint
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT runlimit_cleanup_counters('gcra', 'expires_at', p_max_rows, p_lock_timeout_ms);
$$;

-- Sliding windows: the units admitted in each of the nine eighths of a window
-- ending with the eighth of the latest admission (counts[1] that eighth,
-- counts[9] the eighth eight before it), and when they all stop counting: the
-- start of the ninth eighth after the latest, a multiple of the policy's
-- eighth in microseconds since the epoch, from which the latest eighth's
-- number follows. The version is the row's creation time in microseconds, as
-- for GCRA: a receipt from before a reset names another version.
-- The decision arithmetic (what is reported, and when) is the client's,
-- shared with the memory store (runlimit_core::sliding); this function only
-- counts, decides and writes, returning the counts it judged.
CREATE TABLE runlimit_sliding_windows (
    counter_key bytea PRIMARY KEY CHECK (octet_length(counter_key) = 64),
    counts bigint[] NOT NULL CHECK (pg_catalog.cardinality(counts) = 9),
    version bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    capacity_shard smallint GENERATED ALWAYS AS (get_byte(counter_key, 32)) STORED
) WITH (fillfactor = 80);

CREATE INDEX runlimit_sliding_windows_expiry ON runlimit_sliding_windows (expires_at);

INSERT INTO runlimit_capacity_ledger (counter_table, shard, used)
SELECT 'sliding_windows', shard, 0 FROM generate_series(0, 255) AS shard;

CREATE TRIGGER runlimit_sliding_windows_count_inserts
    AFTER INSERT ON runlimit_sliding_windows
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION runlimit_ledger_count_inserts('sliding_windows');

CREATE TRIGGER runlimit_sliding_windows_count_deletes
    AFTER DELETE ON runlimit_sliding_windows
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION runlimit_ledger_count_deletes('sliding_windows');

CREATE TRIGGER runlimit_sliding_windows_count_truncate
    AFTER TRUNCATE ON runlimit_sliding_windows
    FOR EACH STATEMENT EXECUTE FUNCTION runlimit_ledger_count_truncate('sliding_windows');

-- The counts of eighth p_latest as of eighth p_bucket: eighths that fell out
-- of the nine dropped. A bucket before the latest (a clock that stepped
-- back) leaves them as they are.
CREATE FUNCTION runlimit_sliding_counts_at(p_counts bigint[], p_latest bigint, p_bucket bigint)
RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE SET search_path FROM CURRENT AS $$
DECLARE
    v_shift bigint := p_bucket - p_latest;
    v_counts bigint[] := '{0,0,0,0,0,0,0,0,0}';
    j integer;
BEGIN
    IF v_shift <= 0 THEN
        RETURN p_counts;
    END IF;
    FOR j IN (LEAST(v_shift, 9) + 1)..9 LOOP
        v_counts[j] := p_counts[j - v_shift];
    END LOOP;
    RETURN v_counts;
END;
$$;

-- Admission of a batch. p_sub_window_us: each policy's eighth of its window.
-- Replies per check: outcome, the eighth and counts it was judged against (as
-- of now, before the admission), the clock sample and the row's version.
CREATE FUNCTION runlimit_check_sliding_windows(
    p_keys bytea[],
    p_lock_ids bigint[],
    p_limits bigint[],
    p_sub_window_us bigint[],
    p_costs bigint[],
    p_max_rows_per_shard integer,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS TABLE (
    r_index integer,
    r_outcome smallint,
    r_latest bigint,
    r_counts bigint[],
    r_now_us bigint,
    r_version bigint
)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_count integer := pg_catalog.cardinality(p_keys);
    v_now_us bigint;
    v_latest bigint[] := '{}';
    v_judged bigint[] := '{}';
    v_counts bigint[];
    v_exists boolean[] := '{}';
    v_version bigint[] := '{}';
    v_outcome smallint[] := '{}';
    v_row record;
    v_bucket bigint;
    v_total bigint;
    i integer;
    j integer;
BEGIN
    v_now_us := runlimit_begin(p_lock_ids, p_lock_timeout_ms, p_relaxed_durability);

    FOR i IN 1..v_count LOOP
        v_bucket := v_now_us / p_sub_window_us[i];
        SELECT s.counts, s.version,
            (EXTRACT(EPOCH FROM s.expires_at) * 1000000)::bigint / p_sub_window_us[i] - 9 AS latest
        INTO v_row
        FROM runlimit_sliding_windows AS s
        WHERE s.counter_key = p_keys[i]
        FOR UPDATE;
        v_exists[i] := FOUND;
        IF FOUND THEN
            v_version[i] := v_row.version;
            v_latest[i] := GREATEST(v_row.latest, v_bucket);
            v_counts := runlimit_sliding_counts_at(v_row.counts, v_row.latest, v_bucket);
        ELSE
            v_version[i] := v_now_us;
            v_latest[i] := v_bucket;
            v_counts := '{0,0,0,0,0,0,0,0,0}';
        END IF;
        v_judged := v_judged || v_counts;
        v_total := 0;
        FOR j IN 1..9 LOOP
            v_total := v_total + v_counts[j];
        END LOOP;
        v_outcome[i] := CASE WHEN v_total + p_costs[i] <= p_limits[i] THEN 0 ELSE 1 END;
    END LOOP;

    v_outcome := runlimit_claim_capacity('sliding_windows', p_keys, v_exists, v_outcome, p_max_rows_per_shard);

    IF 0 = ALL (v_outcome) THEN
        FOR i IN 1..v_count LOOP
            v_counts := v_judged[(9 * i - 8):(9 * i)];
            v_counts[1] := v_counts[1] + p_costs[i];
            IF v_exists[i] THEN
                UPDATE runlimit_sliding_windows AS s
                SET counts = v_counts,
                    expires_at = 'epoch'::timestamptz
                        + (v_latest[i] + 9) * p_sub_window_us[i] * interval '1 microsecond'
                WHERE s.counter_key = p_keys[i];
            ELSE
                INSERT INTO runlimit_sliding_windows (counter_key, counts, version, expires_at)
                VALUES (p_keys[i], v_counts, v_version[i],
                    'epoch'::timestamptz
                        + (v_latest[i] + 9) * p_sub_window_us[i] * interval '1 microsecond');
            END IF;
        END LOOP;
    END IF;

    FOR i IN 1..v_count LOOP
        r_index := i;
        r_outcome := v_outcome[i];
        r_latest := v_latest[i];
        r_counts := v_judged[(9 * i - 8):(9 * i)];
        r_now_us := v_now_us;
        r_version := v_version[i];
        RETURN NEXT;
    END LOOP;
END;
$$;

-- Refunds of sliding-window admissions: gives the cost back to the eighth the
-- admission was counted in (p_admitted_in), at most what that eighth still
-- holds, while it still counts and the row's version is the receipt's. The
-- counts are then exactly those without the refunded check, so no version
-- changes.
CREATE FUNCTION runlimit_refund_sliding_windows(
    p_keys bytea[],
    p_lock_ids bigint[],
    p_sub_window_us bigint[],
    p_costs bigint[],
    p_admitted_in bigint[],
    p_versions bigint[],
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS TABLE (r_index integer, r_credited boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now_us bigint;
    v_row record;
    v_counts bigint[];
    v_slot integer;
    i integer;
BEGIN
    v_now_us := runlimit_begin(p_lock_ids, p_lock_timeout_ms, p_relaxed_durability);

    FOR i IN 1..pg_catalog.cardinality(p_keys) LOOP
        SELECT s.counts, s.version,
            (EXTRACT(EPOCH FROM s.expires_at) * 1000000)::bigint / p_sub_window_us[i] - 9 AS latest
        INTO v_row
        FROM runlimit_sliding_windows AS s
        WHERE s.counter_key = p_keys[i]
        FOR UPDATE;
        r_index := i;
        r_credited := false;
        -- Still counted now: the ninth eighth after it has not begun.
        IF FOUND AND v_row.version = p_versions[i]
            AND p_admitted_in[i] + 9 > v_now_us / p_sub_window_us[i]
            AND p_admitted_in[i] <= v_row.latest
            AND v_row.latest - p_admitted_in[i] < 9 THEN
            v_slot := (v_row.latest - p_admitted_in[i])::integer + 1;
            v_counts := v_row.counts;
            IF v_counts[v_slot] > 0 THEN
                v_counts[v_slot] := GREATEST(v_counts[v_slot] - p_costs[i], 0);
                UPDATE runlimit_sliding_windows AS s
                SET counts = v_counts
                WHERE s.counter_key = p_keys[i];
                r_credited := true;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;

CREATE FUNCTION runlimit_reset_sliding_windows(
    p_key bytea,
    p_lock_id bigint,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS boolean
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT runlimit_reset_counter('sliding_windows', 'expires_at', p_key, p_lock_id,
        p_lock_timeout_ms, p_relaxed_durability);
$$;

CREATE FUNCTION runlimit_cleanup_sliding_windows(p_max_rows integer, p_lock_timeout_ms integer)
RETURNS bigint
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT runlimit_cleanup_counters('sliding_windows', 'expires_at', p_max_rows, p_lock_timeout_ms);
$$;
