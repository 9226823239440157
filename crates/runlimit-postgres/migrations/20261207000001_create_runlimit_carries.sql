-- Carries and checks of any algorithm: the functions behind policies that
-- continue from a predecessor, key hashers that keep a previous secret, and
-- limiters of AnyPolicy checks (batches that mix algorithms). Built on the
-- foundations migration and the three counter tables.
--
-- Algorithms are numbered 1 (fixed window, runlimit_fixed_windows),
-- 2 (sliding window, runlimit_sliding_windows) and 3 (GCRA, runlimit_gcra).
-- A counter's state travels as a bigint[] in one form per algorithm, times
-- in microseconds since the Unix epoch:
--   1: [used, window expiry]
--   2: [expiry, the nine counts (the latest eighth first)]
--   3: [arrival time, its remainder in units of 1/quota microsecond]
-- and a policy as two numbers: its limit (GCRA: its quota) and its window
-- (GCRA: its period) in microseconds. A check's carry sources travel as two
-- arrays: their counter keys, and four numbers each, in the order they are
-- read: the check they belong to (1-based), their algorithm, limit and
-- window.
--
-- A counter with no live state (no window or counts still counting, no
-- arrival time ahead of now) whose check carries starts from the state of
-- the first of its carry sources that holds live state, translated exactly
-- as runlimit_core::carry::carry translates it in microseconds; when none
-- does, it starts fresh. Sources are read as last committed, never locked
-- or changed. The carried state is stored whether or not the check is
-- allowed (carrying is not consuming), so a subject pays for its carry once.
--
-- Lock order, here as everywhere: the counters' advisory locks in ascending
-- id order, then their rows, then capacity-ledger rows in the order of
-- (counter table, shard), fixed_windows before gcra before sliding_windows,
-- so functions that touch several tables cannot wait on each other in a
-- cycle. The functions of single checks below carry under the counter's row
-- lock alone when its row exists (as they decide), and leave a counter
-- without a row, which needs its advisory lock and capacity, to
-- runlimit_check_counters, taking no lock before it.

-- A counter's state in its algorithm's form, as last committed; NULL when
-- the counter has no row (or p_algorithm is NULL).
CREATE FUNCTION runlimit_counter_state(p_algorithm smallint, p_key bytea)
RETURNS bigint[]
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT CASE p_algorithm
        WHEN 1 THEN (
            SELECT ARRAY[w.used::bigint, (EXTRACT(EPOCH FROM w.window_expires_at) * 1000000)::bigint]
            FROM runlimit_fixed_windows AS w WHERE w.counter_key = p_key)
        WHEN 2 THEN (
            SELECT ARRAY[(EXTRACT(EPOCH FROM s.expires_at) * 1000000)::bigint] || s.counts::bigint[]
            FROM runlimit_sliding_windows AS s WHERE s.counter_key = p_key)
        WHEN 3 THEN (
            SELECT ARRAY[g.tat_us, g.tat_rem::bigint]
            FROM runlimit_gcra AS g WHERE g.counter_key = p_key)
    END;
$$;

-- The state a counter of policy (p_to, p_to_limit, p_to_window_us) starts
-- from at p_now_us, carrying p_state, a state of a counter of policy
-- (p_from, p_from_limit, p_from_window_us): runlimit_core::carry::carry in
-- microseconds, with numeric wherever the core computes in 128 bits. NULL
-- when the state holds nothing against its subject (the counter starts
-- fresh).
CREATE FUNCTION runlimit_carry_state(
    p_from smallint,
    p_from_limit bigint,
    p_from_window_us bigint,
    p_state bigint[],
    p_to smallint,
    p_to_limit bigint,
    p_to_window_us bigint,
    p_now_us bigint
) RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE SET search_path FROM CURRENT AS $$
DECLARE
    -- Twice the longest window, the furthest a carried state reaches ahead.
    c_horizon CONSTANT bigint := 2 * 366 * 86400 * 1000000::bigint;
    v_held numeric;
    v_sub bigint;
    v_latest bigint;
    v_counts bigint[];
    v_windows numeric;
    v_last bigint;
    v_ahead numeric;
    v_whole numeric;
    v_rem numeric;
    j integer;
BEGIN
    IF p_state IS NULL THEN
        RETURN NULL;
    END IF;
    -- The units the state still holds against its subject, rounded up.
    IF p_from = 1 THEN
        v_held := CASE WHEN p_state[2] > p_now_us THEN p_state[1] ELSE 0 END;
    ELSIF p_from = 2 THEN
        v_sub := p_from_window_us / 8;
        v_counts := runlimit_sliding_counts_at(p_state[2:10], p_state[1] / v_sub - 9, p_now_us / v_sub);
        v_held := 0;
        FOR j IN 1..9 LOOP
            v_held := v_held + v_counts[j];
        END LOOP;
    ELSIF p_state[1] > p_now_us OR (p_state[1] = p_now_us AND p_state[2] > 0) THEN
        -- GCRA: how far the arrival time lies ahead, in emission intervals
        -- (period / quota), saturating as the core's u64 does.
        v_held := LEAST(
            pg_catalog.div((p_state[1] - p_now_us)::numeric * p_from_limit + p_state[2] + p_from_window_us - 1,
                p_from_window_us),
            18446744073709551615::numeric);
    ELSE
        v_held := 0;
    END IF;
    IF v_held = 0 THEN
        RETURN NULL;
    END IF;

    IF p_to = 1 THEN
        IF p_from = 1 AND p_from_window_us = p_to_window_us THEN
            -- The same window: its count and anchor.
            RETURN p_state[1:2];
        END IF;
        -- Units beyond the limit fill later windows; the window stays full
        -- until every window they reach into has passed.
        v_windows := GREATEST(pg_catalog.div(v_held + p_to_limit - 1, p_to_limit), 1);
        IF v_windows * p_to_window_us <= c_horizon THEN
            v_last := (v_held - (v_windows - 1) * p_to_limit)::bigint;
            RETURN ARRAY[CASE WHEN v_windows = 1 THEN v_last ELSE p_to_limit END,
                p_now_us + (v_windows * p_to_window_us)::bigint];
        END IF;
        RETURN ARRAY[p_to_limit, p_now_us + c_horizon];
    ELSIF p_to = 2 THEN
        v_sub := p_to_window_us / 8;
        IF p_from = 2 AND p_from_window_us = p_to_window_us THEN
            -- The same window: its counts, as of now.
            v_latest := p_state[1] / v_sub - 9;
            v_counts := runlimit_sliding_counts_at(p_state[2:10], v_latest, p_now_us / v_sub);
            RETURN ARRAY[(GREATEST(v_latest, p_now_us / v_sub) + 9) * v_sub] || v_counts;
        END IF;
        -- Counted in an eighth ahead of now: the limit's worth until the
        -- last window they reach into begins, then that window's units.
        v_windows := GREATEST(pg_catalog.div(v_held + p_to_limit - 1, p_to_limit), 1);
        v_counts := '{0,0,0,0,0,0,0,0,0}';
        v_ahead := (v_windows - 1) * p_to_window_us;
        IF v_ahead <= c_horizon THEN
            v_counts[1] := (v_held - (v_windows - 1) * p_to_limit)::bigint;
            IF v_windows > 1 THEN
                v_counts[9] := p_to_limit - v_counts[1];
            END IF;
        ELSE
            v_counts[1] := p_to_limit;
            v_ahead := c_horizon;
        END IF;
        RETURN ARRAY[((p_now_us + v_ahead::bigint) / v_sub + 9) * v_sub] || v_counts;
    END IF;
    -- GCRA.
    IF p_from = 3
        AND p_from_window_us::numeric * p_to_limit = p_to_window_us::numeric * p_from_limit THEN
        -- The same emission interval: the arrival time, its remainder
        -- restated in the new quota's units, rounded up.
        v_rem := pg_catalog.div(p_state[2]::numeric * p_to_limit + p_from_limit - 1, p_from_limit);
        IF v_rem >= p_to_limit THEN
            RETURN ARRAY[p_state[1] + 1, 0];
        END IF;
        RETURN ARRAY[p_state[1], v_rem::bigint];
    END IF;
    -- The units held at the new emission interval, from now.
    v_ahead := v_held * p_to_window_us;
    v_whole := pg_catalog.div(v_ahead, p_to_limit);
    IF v_whole >= c_horizon THEN
        RETURN ARRAY[p_now_us + c_horizon, 0];
    END IF;
    RETURN ARRAY[p_now_us + v_whole::bigint, pg_catalog.mod(v_ahead, p_to_limit)::bigint];
END;
$$;

-- The state check p_check's counter, of policy (p_to, p_to_limit,
-- p_to_window_us), starts from at p_now_us: the first of its sources (of
-- p_source_keys and p_sources, see above) holding live state, translated
-- (r_state), and its index in the source arrays (r_source); NULLs when none
-- holds any. Sources are read as last committed.
CREATE FUNCTION runlimit_carried(
    p_source_keys bytea[],
    p_sources bigint[],
    p_check integer,
    p_to smallint,
    p_to_limit bigint,
    p_to_window_us bigint,
    p_now_us bigint,
    OUT r_state bigint[],
    OUT r_source integer
)
LANGUAGE plpgsql STABLE SET search_path FROM CURRENT AS $$
DECLARE
    j integer;
BEGIN
    FOR j IN 1..coalesce(pg_catalog.cardinality(p_source_keys), 0) LOOP
        CONTINUE WHEN p_sources[4 * j - 3] <> p_check;
        r_state := runlimit_carry_state(p_sources[4 * j - 2]::smallint, p_sources[4 * j - 1],
            p_sources[4 * j],
            runlimit_counter_state(p_sources[4 * j - 2]::smallint, p_source_keys[j]),
            p_to, p_to_limit, p_to_window_us, p_now_us);
        IF r_state IS NOT NULL THEN
            r_source := j;
            RETURN;
        END IF;
    END LOOP;
END;
$$;

-- Checks of any algorithm, decided together: the general path of batches
-- that mix algorithms, of batches and grants whose counters carry, and of
-- carrying single checks of counters without a row.
--
-- Per check (arrays in batch order): its algorithm, counter key, policy
-- (limit and window as above), cost, and GCRA's increment and tolerance
-- (from the client's exact arithmetic; ignored for the windows). Then the
-- carry sources of the checks whose counters carry (see above). p_lock_ids
-- are the checks' advisory-lock ids, ascending and deduplicated. p_up_to
-- makes the call a grant of its one check: between its cost and p_up_to
-- units, as many as fit now (as the grant functions of each algorithm).
--
-- It takes the advisory locks, then each counter's row under its lock, and
-- samples the clock once. A counter without live state with sources starts
-- from the first of them holding live state (runlimit_carried). Every check
-- is decided against its starting state; new rows (carried states, and
-- counters of allowed checks) claim capacity in one pass over the tables in
-- ledger order. If every check is allowed,
-- every state is written; otherwise only the carried states are (a carried
-- state refused for capacity is not, and its check, if it would have been
-- allowed, is refused for capacity).
--
-- Replies per check: outcome, the source it carried from (an index into the
-- source arrays, NULL if none), for a grant the units granted, and the
-- algorithm's own columns as the function of that algorithm returns them:
-- count and window expiry; the eighth and counts judged (as of now, before
-- the admission); how far the arrival time lies ahead of now after the
-- admission. Then the clock sample and the row's version (a carried state
-- is a new version, its creation time).
CREATE FUNCTION runlimit_check_counters(
    p_algorithms smallint[],
    p_keys bytea[],
    p_lock_ids bigint[],
    p_limits bigint[],
    p_window_us bigint[],
    p_costs bigint[],
    p_increment_us bigint[],
    p_increment_rem bigint[],
    p_tolerance_us bigint[],
    p_tolerance_rem bigint[],
    p_source_keys bytea[],
    p_sources bigint[],
    p_up_to bigint,
    p_max_rows_per_shard integer,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS TABLE (
    r_index integer,
    r_outcome smallint,
    r_carried integer,
    r_granted bigint,
    r_used bigint,
    r_expires_us bigint,
    r_latest bigint,
    r_counts bigint[],
    r_ahead_us bigint,
    r_ahead_rem bigint,
    r_now_us bigint,
    r_version bigint
)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_count integer := pg_catalog.cardinality(p_keys);
    v_now_us bigint;
    v_exists boolean[] := '{}';
    v_carried integer[] := '{}';
    v_version bigint[] := '{}';
    v_outcome smallint[] := '{}';
    v_costs bigint[] := p_costs;
    -- Each check's starting state (the carried state, or the stored one as
    -- of now) and its state after the admission, in its algorithm's form,
    -- ten words per check.
    v_start bigint[] := '{}';
    v_next bigint[] := '{}';
    v_state bigint[];
    v_carry bigint[];
    v_source integer;
    v_found boolean;
    v_version_found bigint;
    v_base integer;
    v_sub bigint;
    v_latest bigint;
    v_counts bigint[];
    v_total bigint;
    v_tat_us bigint;
    v_tat_rem bigint;
    v_increment numeric;
    v_new boolean[];
    v_refused boolean[];
    v_algorithm smallint;
    v_allowed boolean;
    i integer;
    j integer;
BEGIN
    v_now_us := runlimit_begin(p_lock_ids, p_lock_timeout_ms, p_relaxed_durability);

    FOR i IN 1..v_count LOOP
        IF p_algorithms[i] = 1 THEN
            SELECT ARRAY[w.used::bigint, (EXTRACT(EPOCH FROM w.window_expires_at) * 1000000)::bigint], 0
            INTO v_state, v_version_found
            FROM runlimit_fixed_windows AS w WHERE w.counter_key = p_keys[i]
            FOR UPDATE;
        ELSIF p_algorithms[i] = 2 THEN
            SELECT ARRAY[(EXTRACT(EPOCH FROM s.expires_at) * 1000000)::bigint] || s.counts::bigint[], s.version
            INTO v_state, v_version_found
            FROM runlimit_sliding_windows AS s WHERE s.counter_key = p_keys[i]
            FOR UPDATE;
        ELSE
            SELECT ARRAY[g.tat_us, g.tat_rem::bigint], g.version
            INTO v_state, v_version_found
            FROM runlimit_gcra AS g WHERE g.counter_key = p_keys[i]
            FOR UPDATE;
        END IF;
        v_found := FOUND;
        v_exists[i] := v_found;
        -- A new row's version is its creation time.
        v_version[i] := CASE WHEN v_found THEN v_version_found ELSE v_now_us END;

        IF NOT coalesce(CASE p_algorithms[i]
                WHEN 1 THEN v_state[2] > v_now_us
                WHEN 2 THEN v_state[1] > v_now_us
                ELSE v_state[1] > v_now_us OR (v_state[1] = v_now_us AND v_state[2] > 0)
            END, false) THEN
            SELECT c.r_state, c.r_source INTO v_carry, v_source
            FROM runlimit_carried(p_source_keys, p_sources, i, p_algorithms[i], p_limits[i],
                p_window_us[i], v_now_us) AS c;
            IF v_source IS NOT NULL THEN
                v_state := v_carry;
                v_carried[i] := v_source;
                v_version[i] := v_now_us;
            END IF;
        END IF;

        v_base := (i - 1) * 10;
        IF p_algorithms[i] = 1 THEN
            IF NOT coalesce(v_state[2] > v_now_us, false) THEN
                -- No live window: the next allowed check anchors anew.
                v_state := ARRAY[0, v_now_us + p_window_us[i]];
            END IF;
            IF p_up_to IS NOT NULL THEN
                v_costs[i] := LEAST(p_up_to, GREATEST(p_limits[i] - v_state[1], p_costs[i]));
            END IF;
            v_outcome[i] := CASE WHEN v_state[1] + v_costs[i] <= p_limits[i] THEN 0 ELSE 1 END;
            v_start[v_base + 1] := v_state[1];
            v_start[v_base + 2] := v_state[2];
            v_next[v_base + 1] := v_state[1] + v_costs[i];
            v_next[v_base + 2] := v_state[2];
        ELSIF p_algorithms[i] = 2 THEN
            v_sub := p_window_us[i] / 8;
            v_latest := v_now_us / v_sub;
            IF v_state IS NULL THEN
                v_counts := '{0,0,0,0,0,0,0,0,0}';
            ELSE
                v_counts := runlimit_sliding_counts_at(v_state[2:10], v_state[1] / v_sub - 9, v_latest);
                v_latest := GREATEST(v_state[1] / v_sub - 9, v_latest);
            END IF;
            v_total := 0;
            FOR j IN 1..9 LOOP
                v_total := v_total + v_counts[j];
            END LOOP;
            IF p_up_to IS NOT NULL THEN
                v_costs[i] := LEAST(p_up_to, GREATEST(p_limits[i] - v_total, p_costs[i]));
            END IF;
            v_outcome[i] := CASE WHEN v_total + v_costs[i] <= p_limits[i] THEN 0 ELSE 1 END;
            v_start[v_base + 1] := (v_latest + 9) * v_sub;
            v_next[v_base + 1] := (v_latest + 9) * v_sub;
            FOR j IN 1..9 LOOP
                v_start[v_base + 1 + j] := v_counts[j];
                v_next[v_base + 1 + j] := v_counts[j];
            END LOOP;
            v_next[v_base + 2] := v_counts[1] + v_costs[i];
        ELSE
            -- start = max(stored or carried arrival time, now)
            IF coalesce(v_state[1] > v_now_us OR (v_state[1] = v_now_us AND v_state[2] > 0), false) THEN
                v_tat_us := v_state[1];
                v_tat_rem := v_state[2];
            ELSE
                v_tat_us := v_now_us;
                v_tat_rem := 0;
            END IF;
            v_start[v_base + 1] := v_tat_us;
            v_start[v_base + 2] := v_tat_rem;
            IF p_up_to IS NULL THEN
                v_tat_us := v_tat_us + p_increment_us[i];
                v_tat_rem := v_tat_rem + p_increment_rem[i];
            ELSE
                -- As many increments of period / quota as the tolerance
                -- holds now, at least the cost, at most p_up_to.
                v_costs[i] := LEAST(p_up_to::numeric, GREATEST(
                    pg_catalog.div(p_tolerance_us[i]::numeric * p_limits[i] + p_tolerance_rem[i]
                        - ((v_tat_us - v_now_us)::numeric * p_limits[i] + v_tat_rem), p_window_us[i]),
                    p_costs[i]::numeric))::bigint;
                v_increment := v_costs[i]::numeric * p_window_us[i];
                v_tat_us := v_tat_us + pg_catalog.div(v_increment, p_limits[i])::bigint;
                v_tat_rem := v_tat_rem + pg_catalog.mod(v_increment, p_limits[i])::bigint;
            END IF;
            IF v_tat_rem >= p_limits[i] THEN
                v_tat_us := v_tat_us + 1;
                v_tat_rem := v_tat_rem - p_limits[i];
            END IF;
            v_outcome[i] := CASE
                WHEN v_tat_us - v_now_us > p_tolerance_us[i]
                    OR (v_tat_us - v_now_us = p_tolerance_us[i] AND v_tat_rem > p_tolerance_rem[i]) THEN 1
                ELSE 0
            END;
            v_next[v_base + 1] := v_tat_us;
            v_next[v_base + 2] := v_tat_rem;
        END IF;
    END LOOP;

    -- Capacity for new rows: carried states, and counters of allowed checks,
    -- claimed table by table in ledger order.
    FOREACH v_algorithm IN ARRAY '{1,3,2}'::smallint[] LOOP
        v_new := '{}';
        FOR i IN 1..v_count LOOP
            v_new[i] := p_algorithms[i] = v_algorithm AND NOT v_exists[i]
                AND (v_carried[i] IS NOT NULL OR v_outcome[i] = 0);
        END LOOP;
        CONTINUE WHEN NOT (true = ANY (v_new));
        v_refused := runlimit_refuse_beyond_capacity(
            CASE v_algorithm WHEN 1 THEN 'fixed_windows' WHEN 2 THEN 'sliding_windows' ELSE 'gcra' END,
            p_keys, v_new, p_max_rows_per_shard);
        FOR i IN 1..v_count LOOP
            IF v_refused[i] THEN
                v_carried[i] := NULL;
                IF v_outcome[i] = 0 THEN
                    v_outcome[i] := 2;
                END IF;
            END IF;
        END LOOP;
    END LOOP;

    v_allowed := 0 = ALL (v_outcome);
    FOR i IN 1..v_count LOOP
        CONTINUE WHEN NOT v_allowed AND v_carried[i] IS NULL;
        v_base := (i - 1) * 10;
        v_state := CASE WHEN v_allowed THEN v_next[(v_base + 1):(v_base + 10)]
            ELSE v_start[(v_base + 1):(v_base + 10)] END;
        IF p_algorithms[i] = 1 THEN
            IF v_exists[i] THEN
                UPDATE runlimit_fixed_windows AS w
                SET used = v_state[1],
                    window_expires_at = 'epoch'::timestamptz + v_state[2] * interval '1 microsecond'
                WHERE w.counter_key = p_keys[i];
            ELSE
                INSERT INTO runlimit_fixed_windows (counter_key, used, window_expires_at)
                VALUES (p_keys[i], v_state[1],
                    'epoch'::timestamptz + v_state[2] * interval '1 microsecond');
            END IF;
        ELSIF p_algorithms[i] = 2 THEN
            IF v_exists[i] THEN
                UPDATE runlimit_sliding_windows AS s
                SET counts = v_state[2:10],
                    version = v_version[i],
                    expires_at = 'epoch'::timestamptz + v_state[1] * interval '1 microsecond'
                WHERE s.counter_key = p_keys[i];
            ELSE
                INSERT INTO runlimit_sliding_windows (counter_key, counts, version, expires_at)
                VALUES (p_keys[i], v_state[2:10], v_version[i],
                    'epoch'::timestamptz + v_state[1] * interval '1 microsecond');
            END IF;
        ELSIF v_exists[i] THEN
            UPDATE runlimit_gcra AS g
            SET tat_us = v_state[1],
                tat_rem = v_state[2],
                version = v_version[i],
                expires_at = 'epoch'::timestamptz
                    + (v_state[1] + (v_state[2] > 0)::integer) * interval '1 microsecond'
            WHERE g.counter_key = p_keys[i];
        ELSE
            INSERT INTO runlimit_gcra (counter_key, tat_us, tat_rem, expires_at, version)
            VALUES (p_keys[i], v_state[1], v_state[2],
                'epoch'::timestamptz + (v_state[1] + (v_state[2] > 0)::integer) * interval '1 microsecond',
                v_version[i]);
        END IF;
    END LOOP;

    FOR i IN 1..v_count LOOP
        v_base := (i - 1) * 10;
        r_index := i;
        r_outcome := v_outcome[i];
        r_carried := v_carried[i];
        r_granted := CASE WHEN p_up_to IS NULL THEN NULL WHEN v_outcome[i] = 0 THEN v_costs[i] ELSE 0 END;
        r_used := NULL;
        r_expires_us := NULL;
        r_latest := NULL;
        r_counts := NULL;
        r_ahead_us := NULL;
        r_ahead_rem := NULL;
        IF p_algorithms[i] = 1 THEN
            r_used := CASE WHEN v_outcome[i] = 0 THEN v_next[v_base + 1] ELSE v_start[v_base + 1] END;
            r_expires_us := v_start[v_base + 2];
        ELSIF p_algorithms[i] = 2 THEN
            r_latest := v_start[v_base + 1] / (p_window_us[i] / 8) - 9;
            r_counts := v_start[(v_base + 2):(v_base + 10)];
        ELSE
            r_ahead_us := v_next[v_base + 1] - v_now_us;
            r_ahead_rem := v_next[v_base + 2];
        END IF;
        r_now_us := v_now_us;
        r_version := v_version[i];
        RETURN NEXT;
    END LOOP;
END;
$$;

-- A single fixed-window check whose counter carries: the fallback of the
-- in-place `UPDATE` (the crate's `single` module sends a carrying check the
-- update any check takes, with this function in place of
-- runlimit_check_fixed_window and the check's carry sources after its
-- parameters). It decides as that function does: a full live window denied
-- from the row as last committed, without its lock; anything else under the
-- row's lock, where a window that has ended starts from the first source
-- holding live state (runlimit_carried), or else anew; a counter without a
-- row with runlimit_check_counters (its advisory lock and capacity). Replies
-- as that function, and the source carried from. A carried state is stored
-- even when the check is denied (carrying is not consuming), so the subject
-- carries once.
CREATE FUNCTION runlimit_check_live_fixed_window(
    p_key bytea,
    p_lock_id bigint,
    p_limit bigint,
    p_window_us bigint,
    p_cost bigint,
    p_max_rows_per_shard integer,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean,
    p_source_keys bytea[],
    p_sources bigint[],
    OUT r_outcome smallint,
    OUT r_used bigint,
    OUT r_expires_us bigint,
    OUT r_now_us bigint,
    OUT r_carried integer
)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now timestamptz;
    v_used bigint;
    v_expires timestamptz;
    v_found boolean;
    v_carry bigint[];
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    IF p_relaxed_durability THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    -- A full live window denies without the row's lock.
    SELECT w.used, w.window_expires_at INTO v_used, v_expires
    FROM runlimit_fixed_windows AS w
    WHERE w.counter_key = p_key;
    v_found := FOUND;
    IF v_found THEN
        v_now := pg_catalog.clock_timestamp();
        IF v_expires > v_now AND v_used + p_cost > p_limit THEN
            r_outcome := 1;
            r_used := v_used;
            r_expires_us := (EXTRACT(EPOCH FROM v_expires) * 1000000)::bigint;
            r_now_us := (EXTRACT(EPOCH FROM v_now) * 1000000)::bigint;
            RETURN;
        END IF;
        SELECT w.used, w.window_expires_at INTO v_used, v_expires
        FROM runlimit_fixed_windows AS w
        WHERE w.counter_key = p_key
        FOR UPDATE;
        v_found := FOUND;
    END IF;
    IF NOT v_found THEN
        -- A new counter (no lock is held): the general path.
        SELECT c.r_outcome, c.r_used, c.r_expires_us, c.r_now_us, c.r_carried
        INTO r_outcome, r_used, r_expires_us, r_now_us, r_carried
        FROM runlimit_check_counters('{1}', ARRAY[p_key], ARRAY[p_lock_id], ARRAY[p_limit],
            ARRAY[p_window_us], ARRAY[p_cost], '{0}', '{0}', '{0}', '{0}', p_source_keys, p_sources,
            NULL, p_max_rows_per_shard, p_lock_timeout_ms, p_relaxed_durability) AS c;
        RETURN;
    END IF;
    v_now := pg_catalog.clock_timestamp();
    r_now_us := (EXTRACT(EPOCH FROM v_now) * 1000000)::bigint;
    IF v_expires <= v_now THEN
        SELECT c.r_state, c.r_source INTO v_carry, r_carried
        FROM runlimit_carried(p_source_keys, p_sources, 1, 1::smallint, p_limit, p_window_us,
            r_now_us) AS c;
        IF r_carried IS NULL THEN
            -- Nothing to carry: the next allowed check anchors anew.
            v_used := 0;
            v_expires := v_now + p_window_us * interval '1 microsecond';
        ELSE
            v_used := v_carry[1];
            v_expires := 'epoch'::timestamptz + v_carry[2] * interval '1 microsecond';
        END IF;
    END IF;
    r_used := v_used;
    r_expires_us := (EXTRACT(EPOCH FROM v_expires) * 1000000)::bigint;
    IF r_used + p_cost <= p_limit THEN
        r_outcome := 0;
        r_used := r_used + p_cost;
    ELSE
        r_outcome := 1;
    END IF;
    IF r_outcome = 0 OR r_carried IS NOT NULL THEN
        UPDATE runlimit_fixed_windows AS w
        SET used = r_used, window_expires_at = v_expires
        WHERE w.counter_key = p_key;
    END IF;
END;
$$;

-- Settles an in-place fixed-window batch (of the crate's `batch` module)
-- naming a counter that carries, as runlimit_settle_fixed_windows settles
-- the others: it takes back what the update added, denies the batch from
-- the rows as last committed when every counter has a row, every carrying
-- one a live window, and one is full, and otherwise decides it under its
-- locks with runlimit_check_counters, which carries. Its sources follow
-- the settings. The reply is flat: (outcome, used, window expiry, the
-- source carried from or 0) for each check in batch order, then the clock
-- sample.
CREATE FUNCTION runlimit_settle_live_fixed_windows(
    p_keys bytea[],
    p_lock_ids bigint[],
    p_limits bigint[],
    p_window_us bigint[],
    p_costs bigint[],
    p_max_rows_per_shard integer,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean,
    p_source_keys bytea[],
    p_sources bigint[]
) RETURNS bigint[]
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_count integer := pg_catalog.cardinality(p_keys);
    v_used bigint[] := '{}';
    v_expires timestamptz[] := '{}';
    v_reply bigint[] := '{}';
    v_now timestamptz;
    v_now_us bigint;
    v_all_live boolean := true;
    v_denied boolean := false;
    v_writer xid := pg_catalog.xid(pg_catalog.pg_current_xact_id_if_assigned());
    v_one_used bigint;
    v_one_expires timestamptz;
    v_row record;
    i integer;
BEGIN
    -- What the update added, taken back (see runlimit_settle_fixed_windows).
    IF v_writer IS NOT NULL THEN
        FOR i IN 1..v_count LOOP
            UPDATE runlimit_fixed_windows AS w
            SET used = w.used - p_costs[i]
            WHERE w.counter_key = p_keys[i] AND w.xmin = v_writer;
        END LOOP;
    END IF;

    FOR i IN 1..v_count LOOP
        SELECT w.used, w.window_expires_at INTO v_one_used, v_one_expires
        FROM runlimit_fixed_windows AS w
        WHERE w.counter_key = p_keys[i];
        v_all_live := v_all_live AND FOUND;
        v_used[i] := v_one_used;
        v_expires[i] := v_one_expires;
    END LOOP;
    IF v_all_live THEN
        v_now := pg_catalog.clock_timestamp();
        v_now_us := (EXTRACT(EPOCH FROM v_now) * 1000000)::bigint;
        FOR i IN 1..v_count LOOP
            IF v_expires[i] <= v_now THEN
                -- A carrying counter's state depends on its sources.
                v_all_live := v_all_live AND NOT coalesce(i = ANY (
                    SELECT p_sources[4 * j - 3] FROM pg_catalog.generate_subscripts(p_source_keys, 1) AS j
                ), false);
                v_used[i] := 0;
                v_expires[i] := v_now + p_window_us[i] * interval '1 microsecond';
            END IF;
            IF v_used[i] + p_costs[i] <= p_limits[i] THEN
                v_reply := v_reply || ARRAY[0, v_used[i] + p_costs[i],
                    (EXTRACT(EPOCH FROM v_expires[i]) * 1000000)::bigint, 0];
            ELSE
                v_denied := true;
                v_reply := v_reply || ARRAY[1, v_used[i],
                    (EXTRACT(EPOCH FROM v_expires[i]) * 1000000)::bigint, 0];
            END IF;
        END LOOP;
        IF v_all_live AND v_denied THEN
            RETURN v_reply || v_now_us;
        END IF;
        v_reply := '{}';
    END IF;

    FOR v_row IN
        SELECT c.r_outcome, c.r_used, c.r_expires_us, c.r_carried, c.r_now_us
        FROM runlimit_check_counters(
            pg_catalog.array_fill(1::smallint, ARRAY[v_count]), p_keys, p_lock_ids, p_limits,
            p_window_us, p_costs, NULL, NULL, NULL, NULL, p_source_keys, p_sources, NULL,
            p_max_rows_per_shard, p_lock_timeout_ms, p_relaxed_durability) AS c
        ORDER BY c.r_index
    LOOP
        v_reply := v_reply || ARRAY[v_row.r_outcome::bigint, v_row.r_used, v_row.r_expires_us,
            coalesce(v_row.r_carried, 0)];
        v_now_us := v_row.r_now_us;
    END LOOP;
    RETURN v_reply || v_now_us;
END;
$$;

-- A single GCRA check whose counter carries: runlimit_check_gcra_counter
-- with the check's carry sources (and its period and cost, which a new
-- counter's general path takes). Under the row's lock, an arrival time
-- that has passed starts from the first source holding live state
-- (runlimit_carried), or else from now; a counter without a row goes to
-- runlimit_check_counters. Replies as that function, and the source
-- carried from; a carried state is stored even when the check is denied,
-- as a new version (its creation time).
CREATE FUNCTION runlimit_check_live_gcra_counter(
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
    p_period_us bigint,
    p_cost bigint,
    p_source_keys bytea[],
    p_sources bigint[],
    OUT r_outcome smallint,
    OUT r_ahead_us bigint,
    OUT r_ahead_rem bigint,
    OUT r_now_us bigint,
    OUT r_version bigint,
    OUT r_carried integer
)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_tat_us bigint;
    v_tat_rem bigint;
    v_next_us bigint;
    v_next_rem bigint;
    v_carry bigint[];
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    IF p_relaxed_durability THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    SELECT g.tat_us, g.tat_rem, g.version INTO v_tat_us, v_tat_rem, r_version
    FROM runlimit_gcra AS g
    WHERE g.counter_key = p_key
    FOR UPDATE;
    IF NOT FOUND THEN
        -- A new counter (no lock is held): the general path.
        SELECT c.r_outcome, c.r_ahead_us, c.r_ahead_rem, c.r_now_us, c.r_version, c.r_carried
        INTO r_outcome, r_ahead_us, r_ahead_rem, r_now_us, r_version, r_carried
        FROM runlimit_check_counters('{3}', ARRAY[p_key], ARRAY[p_lock_id], ARRAY[p_quota],
            ARRAY[p_period_us], ARRAY[p_cost], ARRAY[p_increment_us], ARRAY[p_increment_rem],
            ARRAY[p_tolerance_us], ARRAY[p_tolerance_rem], p_source_keys, p_sources, NULL,
            p_max_rows_per_shard, p_lock_timeout_ms, p_relaxed_durability) AS c;
        RETURN;
    END IF;
    r_now_us := (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000000)::bigint;
    IF NOT (v_tat_us > r_now_us OR (v_tat_us = r_now_us AND v_tat_rem > 0)) THEN
        SELECT c.r_state, c.r_source INTO v_carry, r_carried
        FROM runlimit_carried(p_source_keys, p_sources, 1, 3::smallint, p_quota, p_period_us,
            r_now_us) AS c;
        IF r_carried IS NULL THEN
            v_tat_us := r_now_us;
            v_tat_rem := 0;
        ELSE
            v_tat_us := v_carry[1];
            v_tat_rem := v_carry[2];
            r_version := r_now_us;
        END IF;
    END IF;
    -- The arrival time (live or carried, so not before now) plus one
    -- increment; beyond the tolerance is a denial.
    v_next_us := v_tat_us + p_increment_us;
    v_next_rem := v_tat_rem + p_increment_rem;
    IF v_next_rem >= p_quota THEN
        v_next_us := v_next_us + 1;
        v_next_rem := v_next_rem - p_quota;
    END IF;
    r_ahead_us := v_next_us - r_now_us;
    r_ahead_rem := v_next_rem;
    IF r_ahead_us > p_tolerance_us
        OR (r_ahead_us = p_tolerance_us AND r_ahead_rem > p_tolerance_rem) THEN
        r_outcome := 1;
    ELSE
        r_outcome := 0;
        v_tat_us := v_next_us;
        v_tat_rem := v_next_rem;
    END IF;
    IF r_outcome = 0 OR r_carried IS NOT NULL THEN
        UPDATE runlimit_gcra AS g
        SET tat_us = v_tat_us,
            tat_rem = v_tat_rem,
            version = r_version,
            expires_at = 'epoch'::timestamptz
                + (v_tat_us + (v_tat_rem > 0)::integer) * interval '1 microsecond'
        WHERE g.counter_key = p_key;
    END IF;
END;
$$;

-- A single sliding-window check whose counter carries:
-- runlimit_check_sliding_window with the check's carry sources. Under the
-- row's lock, counts that no longer count start from the first source
-- holding live state (runlimit_carried), or else from none; a counter
-- without a row goes to runlimit_check_counters. Replies as that function,
-- and the source carried from; a carried state is stored even when the
-- check is denied, as a new version (its creation time).
CREATE FUNCTION runlimit_check_live_sliding_window(
    p_key bytea,
    p_lock_id bigint,
    p_limit bigint,
    p_sub_window_us bigint,
    p_cost bigint,
    p_max_rows_per_shard integer,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean,
    p_source_keys bytea[],
    p_sources bigint[],
    OUT r_outcome smallint,
    OUT r_latest bigint,
    OUT r_counts bigint[],
    OUT r_now_us bigint,
    OUT r_version bigint,
    OUT r_carried integer
)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_counts bigint[];
    v_expires_us bigint;
    v_bucket bigint;
    v_total bigint := 0;
    v_carry bigint[];
    j integer;
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    IF p_relaxed_durability THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    SELECT s.counts, s.version, (EXTRACT(EPOCH FROM s.expires_at) * 1000000)::bigint
    INTO v_counts, r_version, v_expires_us
    FROM runlimit_sliding_windows AS s
    WHERE s.counter_key = p_key
    FOR UPDATE;
    IF NOT FOUND THEN
        -- A new counter (no lock is held): the general path.
        SELECT c.r_outcome, c.r_latest, c.r_counts, c.r_now_us, c.r_version, c.r_carried
        INTO r_outcome, r_latest, r_counts, r_now_us, r_version, r_carried
        FROM runlimit_check_counters('{2}', ARRAY[p_key], ARRAY[p_lock_id], ARRAY[p_limit],
            ARRAY[p_sub_window_us * 8], ARRAY[p_cost], '{0}', '{0}', '{0}', '{0}', p_source_keys,
            p_sources, NULL, p_max_rows_per_shard, p_lock_timeout_ms, p_relaxed_durability) AS c;
        RETURN;
    END IF;
    r_now_us := (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000000)::bigint;
    IF v_expires_us <= r_now_us THEN
        SELECT c.r_state, c.r_source INTO v_carry, r_carried
        FROM runlimit_carried(p_source_keys, p_sources, 1, 2::smallint, p_limit,
            p_sub_window_us * 8, r_now_us) AS c;
        IF r_carried IS NOT NULL THEN
            v_expires_us := v_carry[1];
            v_counts := v_carry[2:10];
            r_version := r_now_us;
        END IF;
    END IF;
    v_bucket := r_now_us / p_sub_window_us;
    r_latest := GREATEST(v_expires_us / p_sub_window_us - 9, v_bucket);
    r_counts := runlimit_sliding_counts_at(v_counts, v_expires_us / p_sub_window_us - 9, v_bucket);
    FOR j IN 1..9 LOOP
        v_total := v_total + r_counts[j];
    END LOOP;
    v_counts := r_counts;
    IF v_total + p_cost <= p_limit THEN
        r_outcome := 0;
        v_counts[1] := v_counts[1] + p_cost;
    ELSE
        r_outcome := 1;
    END IF;
    IF r_outcome = 0 OR r_carried IS NOT NULL THEN
        UPDATE runlimit_sliding_windows AS s
        SET counts = v_counts,
            version = r_version,
            expires_at = 'epoch'::timestamptz
                + (r_latest + 9) * p_sub_window_us * interval '1 microsecond'
        WHERE s.counter_key = p_key;
    END IF;
END;
$$;

-- The elements of p_values at p_positions, in that order.
CREATE FUNCTION runlimit_pick(p_values anyarray, p_positions integer[])
RETURNS anyarray
LANGUAGE sql IMMUTABLE SET search_path FROM CURRENT AS $$
    SELECT ARRAY(
        SELECT p_values[u.position]
        FROM pg_catalog.unnest(p_positions) WITH ORDINALITY AS u(position, n)
        ORDER BY u.n);
$$;

-- Refunds of a receipt whose checks mix algorithms: takes every counter's
-- advisory lock (p_lock_ids, ascending), then runs each algorithm's refund
-- function on its checks, which then need no lock of their own. Per check:
-- its algorithm, key, the units given back and the receipt's three stamp
-- words, and what its algorithm's refund takes besides: a fixed window's
-- window and a sliding window's eighth in microseconds (p_window_us),
-- GCRA's quota (p_limits) and the increment of the units given back.
CREATE FUNCTION runlimit_refund_counters(
    p_algorithms smallint[],
    p_keys bytea[],
    p_lock_ids bigint[],
    p_units bigint[],
    p_stamp_1 bigint[],
    p_stamp_2 bigint[],
    p_stamp_3 bigint[],
    p_limits bigint[],
    p_window_us bigint[],
    p_increment_us bigint[],
    p_increment_rem bigint[],
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS TABLE (r_index integer, r_credited boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_positions integer[];
    v_algorithm smallint;
BEGIN
    PERFORM runlimit_begin(p_lock_ids, p_lock_timeout_ms, p_relaxed_durability);
    FOREACH v_algorithm IN ARRAY '{1,2,3}'::smallint[] LOOP
        SELECT pg_catalog.array_agg(k ORDER BY k) INTO v_positions
        FROM pg_catalog.generate_subscripts(p_keys, 1) AS k
        WHERE p_algorithms[k] = v_algorithm;
        CONTINUE WHEN v_positions IS NULL;
        IF v_algorithm = 1 THEN
            RETURN QUERY
            SELECT v_positions[f.r_index], f.r_credited
            FROM runlimit_refund_fixed_windows(runlimit_pick(p_keys, v_positions), '{}',
                runlimit_pick(p_units, v_positions), runlimit_pick(p_stamp_1, v_positions),
                runlimit_pick(p_stamp_2, v_positions), runlimit_pick(p_window_us, v_positions),
                p_lock_timeout_ms, p_relaxed_durability) AS f;
        ELSIF v_algorithm = 2 THEN
            RETURN QUERY
            SELECT v_positions[s.r_index], s.r_credited
            FROM runlimit_refund_sliding_windows(runlimit_pick(p_keys, v_positions), '{}',
                runlimit_pick(p_window_us, v_positions), runlimit_pick(p_units, v_positions),
                runlimit_pick(p_stamp_1, v_positions), runlimit_pick(p_stamp_2, v_positions),
                p_lock_timeout_ms, p_relaxed_durability) AS s;
        ELSE
            RETURN QUERY
            SELECT v_positions[g.r_index], g.r_credited
            FROM runlimit_refund_gcra(runlimit_pick(p_keys, v_positions), '{}',
                runlimit_pick(p_limits, v_positions), runlimit_pick(p_increment_us, v_positions),
                runlimit_pick(p_increment_rem, v_positions), runlimit_pick(p_stamp_1, v_positions),
                runlimit_pick(p_stamp_2, v_positions), runlimit_pick(p_stamp_3, v_positions),
                p_lock_timeout_ms, p_relaxed_durability) AS g;
        END IF;
    END LOOP;
END;
$$;

-- Resets a counter and its carry sources, of any algorithms: deletes every
-- row (freeing its ledger slot) and reports whether any was live, so a reset
-- counter carries nothing again. The advisory locks (p_lock_ids, ascending),
-- then the rows, then the ledger rows the deletes count down, in ledger
-- order, before deleting, as cleanup does.
CREATE FUNCTION runlimit_reset_counters(
    p_algorithms smallint[],
    p_keys bytea[],
    p_lock_ids bigint[],
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now timestamptz := 'epoch'::timestamptz
        + runlimit_begin(p_lock_ids, p_lock_timeout_ms, p_relaxed_durability) * interval '1 microsecond';
    v_live boolean := false;
    v_deleted boolean;
    i integer;
BEGIN
    FOR i IN 1..pg_catalog.cardinality(p_keys) LOOP
        IF p_algorithms[i] = 1 THEN
            PERFORM 1 FROM runlimit_fixed_windows AS w WHERE w.counter_key = p_keys[i] FOR UPDATE;
        ELSIF p_algorithms[i] = 2 THEN
            PERFORM 1 FROM runlimit_sliding_windows AS s WHERE s.counter_key = p_keys[i] FOR UPDATE;
        ELSE
            PERFORM 1 FROM runlimit_gcra AS g WHERE g.counter_key = p_keys[i] FOR UPDATE;
        END IF;
    END LOOP;
    PERFORM 1 FROM runlimit_capacity_ledger AS ledger
    WHERE (ledger.counter_table, ledger.shard) IN (
        SELECT CASE p_algorithms[k] WHEN 1 THEN 'fixed_windows' WHEN 2 THEN 'sliding_windows' ELSE 'gcra' END,
            pg_catalog.get_byte(p_keys[k], 32)::smallint
        FROM pg_catalog.generate_subscripts(p_keys, 1) AS k)
    ORDER BY ledger.counter_table, ledger.shard
    FOR UPDATE;
    FOR i IN 1..pg_catalog.cardinality(p_keys) LOOP
        v_deleted := NULL;
        IF p_algorithms[i] = 1 THEN
            DELETE FROM runlimit_fixed_windows AS w WHERE w.counter_key = p_keys[i]
            RETURNING w.window_expires_at > v_now INTO v_deleted;
        ELSIF p_algorithms[i] = 2 THEN
            DELETE FROM runlimit_sliding_windows AS s WHERE s.counter_key = p_keys[i]
            RETURNING s.expires_at > v_now INTO v_deleted;
        ELSE
            DELETE FROM runlimit_gcra AS g WHERE g.counter_key = p_keys[i]
            RETURNING g.expires_at > v_now INTO v_deleted;
        END IF;
        v_live := v_live OR coalesce(v_deleted, false);
    END LOOP;
    RETURN v_live;
END;
$$;

-- Bounded cleanup of all three counter tables, for limiters of every
-- algorithm: at most p_max_rows rows in all, a third of them for fixed
-- windows, half of what is left for GCRA and the rest for sliding windows,
-- so that no table's backlog starves another's. Tables in ledger order.
CREATE FUNCTION runlimit_cleanup_every_counter(p_max_rows integer, p_lock_timeout_ms integer)
RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_removed bigint;
BEGIN
    v_removed := runlimit_cleanup_counters('fixed_windows', 'window_expires_at',
        ((p_max_rows::bigint + 2) / 3)::integer, p_lock_timeout_ms);
    v_removed := v_removed + runlimit_cleanup_counters('gcra', 'expires_at',
        ((p_max_rows - v_removed + 1) / 2)::integer, p_lock_timeout_ms);
    RETURN v_removed + runlimit_cleanup_counters('sliding_windows', 'expires_at',
        (p_max_rows - v_removed)::integer, p_lock_timeout_ms);
END;
$$;
