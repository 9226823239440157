-- Sliding windows: the counter table, its capacity ledger rows and ledger
-- triggers, and its functions (batch and single admission, refund, reset,
-- cleanup). Built on the foundations migration: the column domains, the
-- ledger and its trigger functions, and the shared prologue, capacity,
-- cleanup and reset steps.

-- Sliding windows: the units admitted in each of the nine eighths of a window
-- ending with the eighth of the latest admission (counts[1] that eighth,
-- counts[9] the eighth eight before it), and when they all stop counting: the
-- start of the ninth eighth after the latest, a multiple of the policy's
-- eighth in microseconds since the epoch, from which the latest eighth's
-- number follows. The version is the row's creation time in microseconds, as
-- for GCRA: a receipt from before a reset names another version.
-- The decision arithmetic (what is reported, and when) is the client's,
-- shared with the memory store (runlimit_core::sliding); the functions only
-- count, decide and write, returning the counts they judged.
CREATE TABLE runlimit_sliding_windows (
    counter_key runlimit_counter_key PRIMARY KEY,
    counts runlimit_sliding_counts NOT NULL,
    version bigint NOT NULL,
    expires_at timestamptz NOT NULL
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

-- A single sliding-window check, by a function returning one row. A check
-- of a counter that already has a row is decided under that row's lock
-- alone, as `runlimit_check_fixed_window` does for fixed windows and for the
-- same reasons: the row lock orders the check with every admission, refund,
-- reset and cleanup of that counter, and an existing row needs no room in
-- the capacity ledger. So the function locks the row, then samples the
-- clock, and decides as the batch function does for one element; a denial
-- writes nothing. Only when there is no row does it take the general path.
--
-- Lock order: this path takes one row lock and nothing after it, so it
-- never waits for an advisory lock while holding a row. If the row is
-- deleted while a check waits for its lock, the row is not found and the
-- general path runs.
--
-- The nine eighth-window counts are shifted to the eighth of now; the check
-- is allowed when their sum plus its cost stays within the limit, and then
-- counts in the newest eighth. Replies with the counts it was judged
-- against, as `runlimit_check_sliding_windows` does, and the row's stored
-- version (a receipt compares it on refund).
CREATE FUNCTION runlimit_check_sliding_window(
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

-- A grant: between p_cost and p_up_to units of one counter, as many as its
-- nine eighths leave room for now, in one statement (the shared half of a
-- lease). Under the counter's advisory and row locks (the general path's
-- order) it sums the counts still counted at the database's clock and admits
-- the room with runlimit_check_sliding_windows as one check of that cost.
-- While the locks are held the counts can only fall out, so that admission
-- is allowed unless not even p_cost fitted or a new counter's shard is full;
-- r_granted is then 0. The other columns are what
-- runlimit_check_sliding_windows reports.
CREATE FUNCTION runlimit_grant_sliding_window(
    p_key bytea,
    p_lock_id bigint,
    p_limit bigint,
    p_sub_window_us bigint,
    p_cost bigint,
    p_up_to bigint,
    p_max_rows_per_shard integer,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean,
    OUT r_granted bigint,
    OUT r_outcome smallint,
    OUT r_latest bigint,
    OUT r_counts bigint[],
    OUT r_now_us bigint,
    OUT r_version bigint
)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now_us bigint;
    v_row record;
    v_total bigint := 0;
    v_counts bigint[];
    j integer;
BEGIN
    v_now_us := runlimit_begin(ARRAY[p_lock_id], p_lock_timeout_ms, p_relaxed_durability);
    SELECT s.counts,
        (EXTRACT(EPOCH FROM s.expires_at) * 1000000)::bigint / p_sub_window_us - 9 AS latest
    INTO v_row
    FROM runlimit_sliding_windows AS s
    WHERE s.counter_key = p_key
    FOR UPDATE;
    IF FOUND THEN
        v_counts := runlimit_sliding_counts_at(v_row.counts, v_row.latest, v_now_us / p_sub_window_us);
        FOR j IN 1..9 LOOP
            v_total := v_total + v_counts[j];
        END LOOP;
    END IF;
    r_granted := LEAST(p_up_to, GREATEST(p_limit - v_total, p_cost));
    SELECT c.r_outcome, c.r_latest, c.r_counts, c.r_now_us, c.r_version
    INTO r_outcome, r_latest, r_counts, r_now_us, r_version
    FROM runlimit_check_sliding_windows(ARRAY[p_key], ARRAY[p_lock_id], ARRAY[p_limit],
        ARRAY[p_sub_window_us], ARRAY[r_granted], p_max_rows_per_shard, p_lock_timeout_ms,
        p_relaxed_durability) AS c;
    IF r_outcome <> 0 THEN
        r_granted := 0;
    END IF;
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

-- Reset and bounded cleanup: the shared steps, for this table.
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
