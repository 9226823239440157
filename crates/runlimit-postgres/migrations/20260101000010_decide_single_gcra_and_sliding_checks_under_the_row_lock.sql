-- Single GCRA and sliding-window checks of a counter that already has a
-- row: decided under that row's lock alone, by functions returning one row,
-- as migration 9 does for fixed windows and for the same reasons.
--
-- The row lock orders the check with every admission, refund, reset and
-- cleanup of that counter, and an existing row needs no room in the
-- capacity ledger. So each function locks the row, then samples the clock,
-- and decides as the batch function does for one element; a denial writes
-- nothing. Only when there is no row does it take the general path.
--
-- Lock order: these paths take one row lock and nothing after it, so they
-- never wait for an advisory lock while holding a row (see migration 9).
-- If the row is deleted while a check waits for its lock, the row is not
-- found and the general path runs.
--
-- Each returns the row's stored version, as the general path does for an
-- existing row (a receipt compares it on refund).

-- GCRA: the arrival time starts from the stored one or from now, whichever
-- is later, plus one increment (whole microseconds and remainder); beyond
-- the tolerance is a denial.
CREATE OR REPLACE FUNCTION runlimit_check_gcra_counter(
    p_key bytea,
    p_lock_id bigint,
    p_quota bigint,
    p_increment_us bigint,
    p_increment_rem bigint,
    p_tolerance_us bigint,
    p_tolerance_rem bigint,
    p_max_rows_per_shard integer,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean,
    OUT r_outcome smallint,
    OUT r_ahead_us bigint,
    OUT r_ahead_rem bigint,
    OUT r_now_us bigint,
    OUT r_version bigint
)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_row record;
    v_tat_us bigint;
    v_tat_rem bigint;
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    IF p_relaxed_durability THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    SELECT g.tat_us, g.tat_rem, g.version INTO v_row
    FROM runlimit_gcra AS g
    WHERE g.counter_key = p_key
    FOR UPDATE;
    IF NOT FOUND THEN
        -- A new counter: the general path, with its advisory lock and the
        -- capacity ledger.
        SELECT c.r_outcome, c.r_ahead_us, c.r_ahead_rem, c.r_now_us, c.r_version
        INTO r_outcome, r_ahead_us, r_ahead_rem, r_now_us, r_version
        FROM runlimit_check_gcra(ARRAY[p_key], ARRAY[p_lock_id], ARRAY[p_quota],
            ARRAY[p_increment_us], ARRAY[p_increment_rem], ARRAY[p_tolerance_us],
            ARRAY[p_tolerance_rem], p_max_rows_per_shard, p_lock_timeout_ms,
            p_relaxed_durability) AS c;
        RETURN;
    END IF;
    r_now_us := (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000000)::bigint;
    r_version := v_row.version;
    -- start = max(stored arrival time, now)
    IF v_row.tat_us > r_now_us OR (v_row.tat_us = r_now_us AND v_row.tat_rem > 0) THEN
        v_tat_us := v_row.tat_us + p_increment_us;
        v_tat_rem := v_row.tat_rem + p_increment_rem;
    ELSE
        v_tat_us := r_now_us + p_increment_us;
        v_tat_rem := p_increment_rem;
    END IF;
    IF v_tat_rem >= p_quota THEN
        v_tat_us := v_tat_us + 1;
        v_tat_rem := v_tat_rem - p_quota;
    END IF;
    r_ahead_us := v_tat_us - r_now_us;
    r_ahead_rem := v_tat_rem;
    IF r_ahead_us > p_tolerance_us
        OR (r_ahead_us = p_tolerance_us AND r_ahead_rem > p_tolerance_rem) THEN
        r_outcome := 1;
    ELSE
        r_outcome := 0;
        UPDATE runlimit_gcra AS g
        SET tat_us = v_tat_us,
            tat_rem = v_tat_rem,
            expires_at = 'epoch'::timestamptz
                + (v_tat_us + (v_tat_rem > 0)::integer) * interval '1 microsecond'
        WHERE g.counter_key = p_key;
    END IF;
END;
$$;

-- Sliding windows: the nine eighth-window counts shifted to the eighth of
-- now; the check is allowed when their sum plus its cost stays within the
-- limit, and then counts in the newest eighth. Replies with the counts it
-- was judged against, as `runlimit_check_sliding_windows` does.
CREATE OR REPLACE FUNCTION runlimit_check_sliding_window(
    p_key bytea,
    p_lock_id bigint,
    p_limit bigint,
    p_sub_window_us bigint,
    p_cost bigint,
    p_max_rows_per_shard integer,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean,
    OUT r_outcome smallint,
    OUT r_latest bigint,
    OUT r_counts bigint[],
    OUT r_now_us bigint,
    OUT r_version bigint
)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_row record;
    v_bucket bigint;
    v_total bigint := 0;
    v_counts bigint[];
    j integer;
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    IF p_relaxed_durability THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    SELECT s.counts, s.version,
        (EXTRACT(EPOCH FROM s.expires_at) * 1000000)::bigint / p_sub_window_us - 9 AS latest
    INTO v_row
    FROM runlimit_sliding_windows AS s
    WHERE s.counter_key = p_key
    FOR UPDATE;
    IF NOT FOUND THEN
        -- A new counter: the general path, with its advisory lock and the
        -- capacity ledger.
        SELECT c.r_outcome, c.r_latest, c.r_counts, c.r_now_us, c.r_version
        INTO r_outcome, r_latest, r_counts, r_now_us, r_version
        FROM runlimit_check_sliding_windows(ARRAY[p_key], ARRAY[p_lock_id], ARRAY[p_limit],
            ARRAY[p_sub_window_us], ARRAY[p_cost], p_max_rows_per_shard, p_lock_timeout_ms,
            p_relaxed_durability) AS c;
        RETURN;
    END IF;
    r_now_us := (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000000)::bigint;
    v_bucket := r_now_us / p_sub_window_us;
    r_version := v_row.version;
    r_latest := GREATEST(v_row.latest, v_bucket);
    r_counts := runlimit_sliding_counts_at(v_row.counts, v_row.latest, v_bucket);
    FOR j IN 1..9 LOOP
        v_total := v_total + r_counts[j];
    END LOOP;
    IF v_total + p_cost <= p_limit THEN
        r_outcome := 0;
        v_counts := r_counts;
        v_counts[1] := v_counts[1] + p_cost;
        UPDATE runlimit_sliding_windows AS s
        SET counts = v_counts,
            expires_at = 'epoch'::timestamptz
                + (r_latest + 9) * p_sub_window_us * interval '1 microsecond'
        WHERE s.counter_key = p_key;
    ELSE
        r_outcome := 1;
    END IF;
END;
$$;
