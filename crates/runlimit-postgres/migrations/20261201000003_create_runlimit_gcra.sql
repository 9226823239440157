-- GCRA: the state table, its capacity ledger rows and ledger triggers, and
-- its functions (batch and single admission, refund, reset, cleanup). Built
-- on the foundations migration: the column domains, the ledger and its
-- trigger functions, and the shared prologue, capacity, cleanup and reset
-- steps.

-- GCRA state: the theoretical arrival time as whole microseconds since the Unix
-- epoch plus a remainder in units of 1/quota microsecond, so replenishment is
-- exact. A row expires (its full burst has replenished) at `expires_at`.
--
-- Rows carry a version: refunds compare it with the version their receipt
-- recorded, and a row created anew (after a reset deleted the old one)
-- starts from the creation time in microseconds, a version no receipt of the
-- old row carries.
CREATE TABLE runlimit_gcra (
    counter_key runlimit_counter_key PRIMARY KEY,
    tat_us bigint NOT NULL,
    tat_rem runlimit_nonnegative_bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    version bigint NOT NULL DEFAULT 0
) WITH (fillfactor = 80);

CREATE INDEX runlimit_gcra_expiry ON runlimit_gcra (expires_at);

INSERT INTO runlimit_capacity_ledger (counter_table, shard, used)
SELECT 'gcra', shard, 0 FROM generate_series(0, 255) AS shard;

CREATE TRIGGER runlimit_gcra_count_inserts
    AFTER INSERT ON runlimit_gcra
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION runlimit_ledger_count_inserts('gcra');

CREATE TRIGGER runlimit_gcra_count_deletes
    AFTER DELETE ON runlimit_gcra
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION runlimit_ledger_count_deletes('gcra');

CREATE TRIGGER runlimit_gcra_count_truncate
    AFTER TRUNCATE ON runlimit_gcra
    FOR EACH STATEMENT EXECUTE FUNCTION runlimit_ledger_count_truncate('gcra');

-- Admission of a batch, the general path: advisory locks, then the rows
-- under their locks, then the capacity ledger for new rows. Each check also
-- reports what a receipt needs: the clock sample and the row's version.
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

-- A single GCRA check, by a function returning one row. A check of a
-- counter that already has a row is decided under that row's lock alone,
-- as `runlimit_check_fixed_window` does for fixed windows and for the same
-- reasons: the row lock orders the check with every admission, refund,
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
-- It returns the row's stored version, as the general path does for an
-- existing row (a receipt compares it on refund).
--
-- The arrival time starts from the stored one or from now, whichever is
-- later, plus one increment (whole microseconds and remainder); beyond the
-- tolerance is a denial.
CREATE FUNCTION runlimit_check_gcra_counter(
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

-- A grant: between p_cost and p_up_to units of one counter, as many as its
-- tolerance holds now, in one statement (the shared half of a lease). Under
-- the counter's advisory and row locks (the general path's order) it reads
-- how far the arrival time lies ahead of the database's clock, computes in
-- exact numerics how many increments of p_period_us / p_quota fit within the
-- tolerance, and admits that many with runlimit_check_gcra as one check of
-- that cost. While the locks are held the room can only grow, so that
-- admission is allowed unless not even p_cost fitted or a new counter's
-- shard is full; r_granted is then 0. The other columns are what
-- runlimit_check_gcra reports.
CREATE FUNCTION runlimit_grant_gcra(
    p_key bytea,
    p_lock_id bigint,
    p_quota bigint,
    p_period_us bigint,
    p_tolerance_us bigint,
    p_tolerance_rem bigint,
    p_cost bigint,
    p_up_to bigint,
    p_max_rows_per_shard integer,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean,
    OUT r_granted bigint,
    OUT r_outcome smallint,
    OUT r_ahead_us bigint,
    OUT r_ahead_rem bigint,
    OUT r_now_us bigint,
    OUT r_version bigint
)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now_us bigint;
    v_row record;
    v_ahead numeric := 0;
    v_fits numeric;
    v_increment numeric;
BEGIN
    v_now_us := runlimit_begin(ARRAY[p_lock_id], p_lock_timeout_ms, p_relaxed_durability);
    SELECT g.tat_us, g.tat_rem INTO v_row
    FROM runlimit_gcra AS g
    WHERE g.counter_key = p_key
    FOR UPDATE;
    -- How far max(arrival time, now) lies ahead of now, in 1/p_quota µs.
    IF FOUND AND (v_row.tat_us > v_now_us OR (v_row.tat_us = v_now_us AND v_row.tat_rem > 0)) THEN
        v_ahead := (v_row.tat_us - v_now_us)::numeric * p_quota + v_row.tat_rem;
    END IF;
    v_fits := pg_catalog.floor(
        (p_tolerance_us::numeric * p_quota + p_tolerance_rem - v_ahead) / p_period_us);
    r_granted := LEAST(p_up_to::numeric, GREATEST(v_fits, p_cost::numeric))::bigint;
    v_increment := r_granted::numeric * p_period_us;
    SELECT c.r_outcome, c.r_ahead_us, c.r_ahead_rem, c.r_now_us, c.r_version
    INTO r_outcome, r_ahead_us, r_ahead_rem, r_now_us, r_version
    FROM runlimit_check_gcra(ARRAY[p_key], ARRAY[p_lock_id], ARRAY[p_quota],
        ARRAY[pg_catalog.div(v_increment, p_quota)::bigint],
        ARRAY[pg_catalog.mod(v_increment, p_quota)::bigint],
        ARRAY[p_tolerance_us], ARRAY[p_tolerance_rem],
        p_max_rows_per_shard, p_lock_timeout_ms, p_relaxed_durability) AS c;
    IF r_outcome <> 0 THEN
        r_granted := 0;
    END IF;
END;
$$;

-- Refunds of GCRA admissions: credits what is left of the admission's own
-- replenishment, min(increment, tat_admitted - now), from the current arrival
-- time, while the admission is the latest (the row's arrival time and version
-- are the receipt's); an admission later ones queued behind credits nothing.
CREATE FUNCTION runlimit_refund_gcra(
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
        -- Only the latest admission is credited (the stored arrival time is
        -- the receipt's): crediting one that later admissions queued behind
        -- would move their increments earlier.
        IF FOUND AND v_row.version = p_versions[i]
            AND v_row.tat_us = p_admitted_us[i] AND v_row.tat_rem = p_admitted_rem[i] THEN
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

-- Reset and bounded cleanup: the shared steps, for this table.
CREATE FUNCTION runlimit_reset_gcra(
    p_key bytea,
    p_lock_id bigint,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS boolean
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT runlimit_reset_counter('gcra', 'expires_at', p_key, p_lock_id,
        p_lock_timeout_ms, p_relaxed_durability);
$$;

CREATE FUNCTION runlimit_cleanup_gcra(p_max_rows integer, p_lock_timeout_ms integer)
RETURNS bigint
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT runlimit_cleanup_counters('gcra', 'expires_at', p_max_rows, p_lock_timeout_ms);
$$;
