-- Single GCRA checks of a counter that already has a row: decided under
-- that row's lock alone, by a function returning one row, as migration 9
-- does for fixed windows and for the same reasons.
--
-- The row lock orders the check with every admission, refund, reset and
-- cleanup of that counter, and an existing row needs no room in the
-- capacity ledger. So the function locks the row, then samples the clock,
-- and decides as `runlimit_check_gcra` does for one element: the arrival
-- time starts from the stored one or from now, whichever is later, plus one
-- increment (whole microseconds and remainder); beyond the tolerance is a
-- denial and nothing is written. Only when there is no row does it take the
-- general path.
--
-- Lock order: this path takes one row lock and nothing after it, so it
-- never waits for an advisory lock while holding a row (see migration 9).
-- If the row is deleted while this path waits for its lock, the row is not
-- found and the general path runs.
--
-- The row's version is returned as the general path returns it: the stored
-- one (a receipt compares it on refund).
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
