-- Anchored fixed windows: the counter table, its capacity ledger rows and
-- ledger triggers, and its functions (batch and single admission, the
-- settling of in-place batches, refund, reset, cleanup). Built on the
-- foundations migration: the column domains, the ledger and its trigger
-- functions, and the shared prologue, capacity, cleanup and reset steps.

-- Anchored fixed-window counters, one row per counter key
-- (policy fingerprint || subject key, 64 bytes).
--
-- The fillfactor leaves room on each page for HOT updates of `used`: most
-- admissions update a row in place without touching its indexes.
CREATE TABLE runlimit_fixed_windows (
    counter_key runlimit_counter_key PRIMARY KEY,
    used runlimit_nonnegative_bigint NOT NULL,
    window_expires_at timestamptz NOT NULL
) WITH (fillfactor = 80);

CREATE INDEX runlimit_fixed_windows_expiry ON runlimit_fixed_windows (window_expires_at);

INSERT INTO runlimit_capacity_ledger (counter_table, shard, used)
SELECT 'fixed_windows', shard, 0 FROM generate_series(0, 255) AS shard;

CREATE TRIGGER runlimit_fixed_windows_count_inserts
    AFTER INSERT ON runlimit_fixed_windows
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION runlimit_ledger_count_inserts('fixed_windows');

CREATE TRIGGER runlimit_fixed_windows_count_deletes
    AFTER DELETE ON runlimit_fixed_windows
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION runlimit_ledger_count_deletes('fixed_windows');

CREATE TRIGGER runlimit_fixed_windows_count_truncate
    AFTER TRUNCATE ON runlimit_fixed_windows
    FOR EACH STATEMENT EXECUTE FUNCTION runlimit_ledger_count_truncate('fixed_windows');

-- Admission of a batch, the general path: advisory locks, then the rows
-- under their locks, then the capacity ledger for new rows.
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

-- A single fixed-window check, by a function returning one row.
--
-- Single checks are sent as one `UPDATE` that admits in place (see the
-- crate's `single` module); this function decides what that update leaves:
-- denials, counters without a row, and rows changed or deleted while the
-- update ran.
--
-- A full live window is denied from the row as last committed, without the
-- row's lock: locking the row for a denial would write the lock into the
-- row, assign the transaction an id and make its commit flush the
-- write-ahead log, all to change nothing. The function first reads the row
-- without a lock, then samples the clock. A window still live at that
-- sample was live when the row was read, and if its count leaves no room
-- for the cost, the check is denied as of that read: a denial changes
-- nothing, so it is ordered with the other operations on the counter by the
-- snapshot it read, before any still in progress. The time until retry is
-- measured from the later clock sample, so it is never longer than the
-- window's remainder.
--
-- Anything else (room in the window, an expired window, no row) reads the
-- row again under its lock. The advisory locks of the general path order
-- admissions of one counter before its row exists (two admissions creating
-- it at once) and order the counters of a batch. A single check of an
-- existing row needs neither: the row lock orders it with every admission,
-- refund, reset and cleanup of that counter, and no new row needs room in
-- the capacity ledger. So the function locks the row, then samples the
-- clock, and decides and writes in place: allowed in the live window,
-- anchoring a new window over an expired one, or denied (nothing written).
-- Only when there is no row does it take the general path.
--
-- Lock order: this path takes one row lock and nothing after it; the
-- general path takes advisory locks, then rows, then ledger rows. A
-- transaction here never waits for an advisory lock, so no cycle can form.
-- If the row is deleted (by a reset or cleanup) while this path waits for
-- its lock, the row is not found and the general path runs.
--
-- The function returns one row of OUT parameters rather than a set, so a
-- single check also skips the tuple store and the caller's ORDER BY.
CREATE FUNCTION runlimit_check_fixed_window(
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
--    rather than being told spares the calling statement a sub-select
--    (pg_current_xact_id_if_assigned() needs PostgreSQL 13);
-- 2. denies the batch without any further lock when every counter has a row
--    and one of them is full, as `runlimit_check_fixed_window` denies a
--    single check: the rows are read as last committed, then the clock is
--    sampled, and a window still live at that sample was live when its row
--    was read. A denial changes nothing, so it is ordered with the other
--    operations on those counters by the snapshot it read. The outcomes of
--    the other checks are what `runlimit_check_fixed_windows` would report
--    from the same rows;
-- 3. otherwise decides the batch with `runlimit_check_fixed_windows`, under
--    its advisory and row locks.
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

-- A grant: between p_cost and p_up_to units of one counter, as many as its
-- live window has room for, in one statement (the shared half of a lease).
-- It takes the counter's advisory lock and then its row lock, the order of
-- the general path, reads the room on the database's clock and admits that
-- many units with runlimit_check_fixed_windows as one check of that cost (a
-- new counter claims its capacity there). While the locks are held the room
-- can only grow (the window may end), so that admission is allowed unless
-- not even p_cost fitted or a new counter's shard is full; r_granted is then
-- 0. The other columns are what runlimit_check_fixed_windows reports.
CREATE FUNCTION runlimit_grant_fixed_window(
    p_key bytea,
    p_lock_id bigint,
    p_limit bigint,
    p_window_us bigint,
    p_cost bigint,
    p_up_to bigint,
    p_max_rows_per_shard integer,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean,
    OUT r_granted bigint,
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
    v_now := 'epoch'::timestamptz
        + runlimit_begin(ARRAY[p_lock_id], p_lock_timeout_ms, p_relaxed_durability) * interval '1 microsecond';
    SELECT w.used, w.window_expires_at INTO v_row
    FROM runlimit_fixed_windows AS w
    WHERE w.counter_key = p_key
    FOR UPDATE;
    IF FOUND AND v_row.window_expires_at > v_now THEN
        r_granted := LEAST(p_up_to, GREATEST(p_limit - v_row.used, p_cost));
    ELSE
        r_granted := LEAST(p_up_to, p_limit);
    END IF;
    SELECT c.r_outcome, c.r_used, c.r_expires_us, c.r_now_us
    INTO r_outcome, r_used, r_expires_us, r_now_us
    FROM runlimit_check_fixed_windows(ARRAY[p_key], ARRAY[p_lock_id], ARRAY[p_limit],
        ARRAY[p_window_us], ARRAY[r_granted], p_max_rows_per_shard, p_lock_timeout_ms,
        p_relaxed_durability) AS c;
    IF r_outcome <> 0 THEN
        r_granted := 0;
    END IF;
END;
$$;

-- Refunds of fixed-window admissions. A receipt names its window by the
-- expiry the admission reported and carries the count it left (fixed
-- windows need no row version: a renewal, a re-anchoring refund and a new
-- row all change the expiry). Credited only while that window is still the
-- live one:
--   * nothing else left in it: the window is forgotten (expired in place; the
--     row keeps its ledger slot until cleanup), as if never admitted;
--   * the refunded check started the window and later ones remain: the
--     window is moved to end one window after now, never earlier than it
--     would have without the refunded check (whose successor started it, at
--     some unknown time before now); the new expiry voids the window's other
--     receipts;
--   * otherwise the cost is subtracted.
CREATE FUNCTION runlimit_refund_fixed_windows(
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

-- Reset and bounded cleanup: the shared steps, for this table.
CREATE FUNCTION runlimit_reset_fixed_windows(
    p_key bytea,
    p_lock_id bigint,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS boolean
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT runlimit_reset_counter('fixed_windows', 'window_expires_at', p_key, p_lock_id,
        p_lock_timeout_ms, p_relaxed_durability);
$$;

CREATE FUNCTION runlimit_cleanup_fixed_windows(p_max_rows integer, p_lock_timeout_ms integer)
RETURNS bigint
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT runlimit_cleanup_counters('fixed_windows', 'window_expires_at', p_max_rows, p_lock_timeout_ms);
$$;
