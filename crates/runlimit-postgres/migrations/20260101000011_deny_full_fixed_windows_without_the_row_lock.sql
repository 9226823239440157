-- A single fixed-window check that finds its window full is denied from
-- the row as last committed, without the row's lock.
--
-- Since single fixed-window checks are sent as one `UPDATE` that admits in
-- place (see the crate's `single` module), this function decides what that
-- update leaves: denials, counters without a row, and rows changed or
-- deleted while the update ran. A denial used to lock the row first, which
-- writes the lock into the row, assigns the transaction an id and makes its
-- commit flush the write-ahead log, all to change nothing.
--
-- Now the function first reads the row without a lock, then samples the
-- clock. A window still live at that sample was live when the row was read,
-- and if its count leaves no room for the cost, the check is denied as of
-- that read: a denial changes nothing, so it is ordered with the other
-- operations on the counter by the snapshot it read, before any still in
-- progress. The time until retry is measured from the later clock sample,
-- so it is never longer than the window's remainder. Anything else (room in
-- the window, an expired window, no row) takes the locked path of migration
-- 9, unchanged, which reads the row again under its lock.

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
    -- A full live window denies without the row's lock.
    SELECT w.used, w.window_expires_at INTO v_row
    FROM runlimit_fixed_windows AS w
    WHERE w.counter_key = p_key;
    IF FOUND THEN
        v_now := pg_catalog.clock_timestamp();
        IF v_row.window_expires_at > v_now AND v_row.used + p_cost > p_limit THEN
            r_outcome := 1;
            r_used := v_row.used;
            r_expires_us := (EXTRACT(EPOCH FROM v_row.window_expires_at) * 1000000)::bigint;
            r_now_us := (EXTRACT(EPOCH FROM v_now) * 1000000)::bigint;
            RETURN;
        END IF;
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
