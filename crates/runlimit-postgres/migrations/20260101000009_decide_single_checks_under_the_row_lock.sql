-- Single checks of a counter that already has a row: decided under that
-- row's lock alone, by a function returning one row.
--
-- The advisory locks of the general path order admissions of one counter
-- before its row exists (two admissions creating it at once) and order the
-- counters of a batch. A single check of an existing row needs neither: the
-- row lock orders it with every admission, refund, reset and cleanup of
-- that counter, and no new row needs room in the capacity ledger. So the
-- function first locks the row, then samples the clock, and decides and
-- writes in place: allowed in the live window, anchoring a new window over
-- an expired one, or denied (nothing written). Only when there is no row
-- does it take the general path.
--
-- Lock order: this path takes one row lock and nothing after it; the
-- general path takes advisory locks, then rows, then ledger rows. A
-- transaction here never waits for an advisory lock, so no cycle can form.
-- If the row is deleted (by a reset or cleanup) while this path waits for
-- its lock, the row is not found and the general path runs.
--
-- The function returns one row of OUT parameters rather than a set, so a
-- single check also skips the tuple store and the caller's ORDER BY. Batches
-- keep `runlimit_check_fixed_windows`, unchanged.
CREATE OR REPLACE FUNCTION runlimit_check_fixed_window(
    p_key bytea,
    p_lock_id bigint,
    p_limit bigint,
    p_window_us bigint,
    p_cost bigint,
    p_max_rows_per_shard integer,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean,
    OUT r_outcome smallint,
    OUT r_used bigint,
    OUT r_expires_us bigint,
    OUT r_now_us bigint
)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now timestamptz;
    v_row record;
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    IF p_relaxed_durability THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    SELECT w.used, w.window_expires_at INTO v_row
    FROM runlimit_fixed_windows AS w
    WHERE w.counter_key = p_key
    FOR UPDATE;
    IF NOT FOUND THEN
        -- A new counter: the general path, with its advisory lock and the
        -- capacity ledger.
        SELECT c.r_outcome, c.r_used, c.r_expires_us, c.r_now_us
        INTO r_outcome, r_used, r_expires_us, r_now_us
        FROM runlimit_check_fixed_windows(ARRAY[p_key], ARRAY[p_lock_id], ARRAY[p_limit],
            ARRAY[p_window_us], ARRAY[p_cost], p_max_rows_per_shard, p_lock_timeout_ms,
            p_relaxed_durability) AS c;
        RETURN;
    END IF;
    v_now := pg_catalog.clock_timestamp();
    r_now_us := (EXTRACT(EPOCH FROM v_now) * 1000000)::bigint;
    IF v_row.window_expires_at > v_now THEN
        r_used := v_row.used;
        r_expires_us := (EXTRACT(EPOCH FROM v_row.window_expires_at) * 1000000)::bigint;
    ELSE
        -- An expired window: the next allowed check anchors anew.
        r_used := 0;
        r_expires_us := r_now_us + p_window_us;
    END IF;
    IF r_used + p_cost <= p_limit THEN
        r_outcome := 0;
        r_used := r_used + p_cost;
        UPDATE runlimit_fixed_windows AS w
        SET used = r_used,
            window_expires_at = 'epoch'::timestamptz + r_expires_us * interval '1 microsecond'
        WHERE w.counter_key = p_key;
    ELSE
        r_outcome := 1;
    END IF;
END;
$$;
