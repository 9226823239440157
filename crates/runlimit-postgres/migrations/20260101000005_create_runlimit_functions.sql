-- Server-side admission and maintenance: every check or batch is one statement,
-- so one round trip, whatever the batch size. Each function:
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

CREATE FUNCTION runlimit_check_fixed_windows(
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
    v_now timestamptz;
    v_now_us bigint;
    v_used bigint[] := '{}';
    v_expires timestamptz[] := '{}';
    v_exists boolean[] := '{}';
    v_outcome smallint[] := '{}';
    v_row record;
    v_denied boolean := false;
    v_new boolean[] := '{}';
    v_refused boolean[];
    i integer;
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    IF p_relaxed_durability THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(ids.lock_id)
    FROM pg_catalog.unnest(p_lock_ids) WITH ORDINALITY AS ids(lock_id, position)
    ORDER BY ids.position;

    v_now := pg_catalog.clock_timestamp();
    v_now_us := (EXTRACT(EPOCH FROM v_now) * 1000000)::bigint;

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
            v_denied := true;
        END IF;
    END LOOP;

    -- Rows for new counters need room in their capacity shard.
    FOR i IN 1..v_count LOOP
        v_new[i] := NOT v_exists[i] AND v_outcome[i] = 0;
    END LOOP;
    IF true = ANY (v_new) THEN
        v_refused := runlimit_refuse_beyond_capacity('fixed_windows', p_keys, v_new, p_max_rows_per_shard);
        FOR i IN 1..v_count LOOP
            IF v_refused[i] THEN
                v_outcome[i] := 2;
                v_denied := true;
            END IF;
        END LOOP;
    END IF;

    IF NOT v_denied THEN
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

CREATE FUNCTION runlimit_check_gcra(
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
) RETURNS TABLE (r_index integer, r_outcome smallint, r_ahead_us bigint, r_ahead_rem bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_count integer := pg_catalog.cardinality(p_keys);
    v_now_us bigint;
    v_tat_us bigint[] := '{}';
    v_tat_rem bigint[] := '{}';
    v_ahead_us bigint[] := '{}';
    v_ahead_rem bigint[] := '{}';
    v_exists boolean[] := '{}';
    v_outcome smallint[] := '{}';
    v_row record;
    v_base_us bigint;
    v_base_rem bigint;
    v_denied boolean := false;
    v_new boolean[] := '{}';
    v_refused boolean[];
    i integer;
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    IF p_relaxed_durability THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(ids.lock_id)
    FROM pg_catalog.unnest(p_lock_ids) WITH ORDINALITY AS ids(lock_id, position)
    ORDER BY ids.position;

    v_now_us := (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000000)::bigint;

    FOR i IN 1..v_count LOOP
        SELECT g.tat_us, g.tat_rem INTO v_row
        FROM runlimit_gcra AS g
        WHERE g.counter_key = p_keys[i]
        FOR UPDATE;
        v_exists[i] := FOUND;
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
            v_denied := true;
        ELSE
            v_outcome[i] := 0;
        END IF;
    END LOOP;

    -- Rows for new counters need room in their capacity shard.
    FOR i IN 1..v_count LOOP
        v_new[i] := NOT v_exists[i] AND v_outcome[i] = 0;
    END LOOP;
    IF true = ANY (v_new) THEN
        v_refused := runlimit_refuse_beyond_capacity('gcra', p_keys, v_new, p_max_rows_per_shard);
        FOR i IN 1..v_count LOOP
            IF v_refused[i] THEN
                v_outcome[i] := 2;
                v_denied := true;
            END IF;
        END LOOP;
    END IF;

    IF NOT v_denied THEN
        FOR i IN 1..v_count LOOP
            IF v_exists[i] THEN
                UPDATE runlimit_gcra AS g
                SET tat_us = v_tat_us[i],
                    tat_rem = v_tat_rem[i],
                    expires_at = 'epoch'::timestamptz
                        + (v_tat_us[i] + (v_tat_rem[i] > 0)::integer) * interval '1 microsecond'
                WHERE g.counter_key = p_keys[i];
            ELSE
                INSERT INTO runlimit_gcra (counter_key, tat_us, tat_rem, expires_at)
                VALUES (p_keys[i], v_tat_us[i], v_tat_rem[i],
                    'epoch'::timestamptz
                        + (v_tat_us[i] + (v_tat_rem[i] > 0)::integer) * interval '1 microsecond');
            END IF;
        END LOOP;
    END IF;

    FOR i IN 1..v_count LOOP
        r_index := i;
        r_outcome := v_outcome[i];
        r_ahead_us := v_ahead_us[i];
        r_ahead_rem := v_ahead_rem[i];
        RETURN NEXT;
    END LOOP;
END;
$$;

-- Bounded maintenance: deletes at most p_max_rows expired rows, oldest first,
-- skipping rows an admission holds. One clock sample keeps the predicate an
-- index range condition. Ledger rows are locked in shard order before the
-- delete so cleanup and admissions never wait on each other in a cycle.
CREATE FUNCTION runlimit_cleanup_fixed_windows(p_max_rows integer, p_lock_timeout_ms integer)
RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_keys bytea[];
    v_shards smallint[];
    v_removed bigint;
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    SELECT pg_catalog.array_agg(doomed.counter_key), pg_catalog.array_agg(DISTINCT doomed.capacity_shard)
    INTO v_keys, v_shards
    FROM (
        SELECT w.counter_key, w.capacity_shard
        FROM runlimit_fixed_windows AS w
        WHERE w.window_expires_at <= v_now
        ORDER BY w.window_expires_at
        LIMIT p_max_rows
        FOR UPDATE SKIP LOCKED
    ) AS doomed;
    IF v_keys IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM 1 FROM runlimit_capacity_ledger AS ledger
    WHERE ledger.counter_table = 'fixed_windows' AND ledger.shard = ANY (v_shards)
    ORDER BY ledger.shard
    FOR UPDATE;
    DELETE FROM runlimit_fixed_windows AS w WHERE w.counter_key = ANY (v_keys);
    GET DIAGNOSTICS v_removed = ROW_COUNT;
    RETURN v_removed;
END;
$$;

CREATE FUNCTION runlimit_cleanup_gcra(p_max_rows integer, p_lock_timeout_ms integer)
RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_keys bytea[];
    v_shards smallint[];
    v_removed bigint;
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    SELECT pg_catalog.array_agg(doomed.counter_key), pg_catalog.array_agg(DISTINCT doomed.capacity_shard)
    INTO v_keys, v_shards
    FROM (
        SELECT g.counter_key, g.capacity_shard
        FROM runlimit_gcra AS g
        WHERE g.expires_at <= v_now
        ORDER BY g.expires_at
        LIMIT p_max_rows
        FOR UPDATE SKIP LOCKED
    ) AS doomed;
    IF v_keys IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM 1 FROM runlimit_capacity_ledger AS ledger
    WHERE ledger.counter_table = 'gcra' AND ledger.shard = ANY (v_shards)
    ORDER BY ledger.shard
    FOR UPDATE;
    DELETE FROM runlimit_gcra AS g WHERE g.counter_key = ANY (v_keys);
    GET DIAGNOSTICS v_removed = ROW_COUNT;
    RETURN v_removed;
END;
$$;
