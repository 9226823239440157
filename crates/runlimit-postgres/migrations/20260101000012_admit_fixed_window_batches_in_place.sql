-- Settles a fixed-window batch that the in-place update of the crate's
-- `batch` module did not admit whole.
--
-- Batches of two to eight checks are sent as one statement that first takes
-- the batch's advisory locks, then adds each check's cost to its counter's
-- row with one `UPDATE`, for rows in a live window with room. When it
-- updated every row, the batch is admitted. Otherwise (a denial, a window to
-- anchor anew, a counter without a row, a row changed while the update
-- waited for it) the same statement calls this function, which:
--
-- 1. takes back what that update added: the rows it updated are the batch's
--    rows whose version this transaction wrote (the statement is the whole
--    transaction, and nothing else in it writes before this function runs).
--    The calling statement holds the lock of every row it updated (and the
--    batch's advisory locks), so each such row is still as that update left
--    it, and subtracting the cost returns its count to the value it was
--    locked with. Both happen in the calling statement's one transaction, so
--    no other transaction ever sees the added cost. Asking the row versions
--    rather than being told spares the calling statement a sub-select;
-- 2. denies the batch without any further lock when every counter has a row
--    and one of them is full, as migration 11 denies a single check: the rows
--    are read as last committed, then the clock is sampled, and a window
--    still live at that sample was live when its row was read. A denial
--    changes nothing, so it is ordered with the other operations on those
--    counters by the snapshot it read. The outcomes of the other checks are
--    what `runlimit_check_fixed_windows` would report from the same rows;
-- 3. otherwise decides the batch with `runlimit_check_fixed_windows`, under
--    its advisory and row locks, as every batch was decided before.
--
-- The limiter also calls it directly, as a statement of its own, for a batch
-- naming a counter a recent reply found full, so that such a batch is denied
-- without writing anything; it has then written nothing to take back. Call
-- it only as one of those statements, never after other writes in the same
-- transaction.
--
-- The reply is flat, so that the calling statement can carry it in one
-- column: (outcome, used, window expiry in microseconds since the Unix
-- epoch) for each check in batch order, then the clock sample.
CREATE FUNCTION runlimit_settle_fixed_windows(
    p_keys bytea[],
    p_lock_ids bigint[],
    p_limits bigint[],
    p_window_us bigint[],
    p_costs bigint[],
    p_max_rows_per_shard integer,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS bigint[]
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_count integer := pg_catalog.cardinality(p_keys);
    v_used bigint[] := '{}';
    v_expires timestamptz[] := '{}';
    v_reply bigint[] := '{}';
    v_now timestamptz;
    v_now_us bigint;
    v_denied boolean := false;
    v_writer xid := pg_catalog.xid(pg_catalog.pg_current_xact_id_if_assigned());
    v_row record;
    i integer;
BEGIN
    -- NULL when this transaction has written nothing.
    IF v_writer IS NOT NULL THEN
        FOR i IN 1..v_count LOOP
            UPDATE runlimit_fixed_windows AS w
            SET used = w.used - p_costs[i]
            WHERE w.counter_key = p_keys[i] AND w.xmin = v_writer;
        END LOOP;
    END IF;

    FOR i IN 1..v_count LOOP
        SELECT w.used, w.window_expires_at INTO v_row
        FROM runlimit_fixed_windows AS w
        WHERE w.counter_key = p_keys[i];
        EXIT WHEN NOT FOUND;
        v_used[i] := v_row.used;
        v_expires[i] := v_row.window_expires_at;
    END LOOP;
    IF pg_catalog.cardinality(v_used) = v_count THEN
        v_now := pg_catalog.clock_timestamp();
        FOR i IN 1..v_count LOOP
            IF v_expires[i] <= v_now THEN
                -- An expired window: the next allowed check anchors anew.
                v_used[i] := 0;
                v_expires[i] := v_now + p_window_us[i] * interval '1 microsecond';
            END IF;
            IF v_used[i] + p_costs[i] <= p_limits[i] THEN
                v_reply := v_reply || ARRAY[0, v_used[i] + p_costs[i],
                    (EXTRACT(EPOCH FROM v_expires[i]) * 1000000)::bigint];
            ELSE
                v_denied := true;
                v_reply := v_reply || ARRAY[1, v_used[i],
                    (EXTRACT(EPOCH FROM v_expires[i]) * 1000000)::bigint];
            END IF;
        END LOOP;
        IF v_denied THEN
            RETURN v_reply || (EXTRACT(EPOCH FROM v_now) * 1000000)::bigint;
        END IF;
        v_reply := '{}';
    END IF;

    FOR v_row IN
        SELECT c.r_outcome, c.r_used, c.r_expires_us, c.r_now_us
        FROM runlimit_check_fixed_windows(p_keys, p_lock_ids, p_limits, p_window_us, p_costs,
            p_max_rows_per_shard, p_lock_timeout_ms, p_relaxed_durability) AS c
        ORDER BY c.r_index
    LOOP
        v_reply := v_reply || ARRAY[v_row.r_outcome::bigint, v_row.r_used, v_row.r_expires_us];
        v_now_us := v_row.r_now_us;
    END LOOP;
    RETURN v_reply || v_now_us;
END;
$$;
