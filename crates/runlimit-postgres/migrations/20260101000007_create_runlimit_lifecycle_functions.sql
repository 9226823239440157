-- Refunds, peeks' companions and resets: one statement each, with the lock
-- order, clock and durability rules of admission (see
-- 20260101000005_create_runlimit_functions.sql).
--
-- GCRA rows gain a version: refunds compare it with the version their
-- receipt recorded, a refund that credits an admission later ones queued
-- behind changes it, and a row created anew (after a reset deleted the old
-- one) starts from the creation time in microseconds, a version no receipt
-- of the old row carries. Fixed windows need none: a receipt names its
-- window by its expiry, which a renewal, a re-anchoring refund and a new row
-- all change.
ALTER TABLE runlimit_gcra ADD COLUMN version bigint NOT NULL DEFAULT 0;

-- Admission also reports what a receipt needs: the clock sample and the
-- row's version. Older replicas select the columns they know by name, so
-- they keep working during a rolling deployment.
DROP FUNCTION runlimit_check_gcra(bytea[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], integer, integer, boolean);

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

-- Refunds of fixed-window admissions. A receipt names its window by the
-- expiry the admission reported and carries the count it left. Credited only
-- while that window is still the live one:
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
    PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    IF p_relaxed_durability THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(ids.lock_id)
    FROM pg_catalog.unnest(p_lock_ids) WITH ORDINALITY AS ids(lock_id, position)
    ORDER BY ids.position;
    v_now := pg_catalog.clock_timestamp();

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

-- Refunds of GCRA admissions: credits what is left of the admission's own
-- replenishment, min(increment, tat_admitted - now), from the current arrival
-- time, if the row's version is the receipt's; crediting an admission that
-- later ones queued behind changes the version (their receipts then credit
-- nothing).
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
    PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    IF p_relaxed_durability THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(ids.lock_id)
    FROM pg_catalog.unnest(p_lock_ids) WITH ORDINALITY AS ids(lock_id, position)
    ORDER BY ids.position;
    v_now_us := (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000000)::bigint;

    FOR i IN 1..pg_catalog.cardinality(p_keys) LOOP
        SELECT g.tat_us, g.tat_rem, g.version INTO v_row
        FROM runlimit_gcra AS g
        WHERE g.counter_key = p_keys[i]
        FOR UPDATE;
        r_index := i;
        r_credited := false;
        IF FOUND AND v_row.version = p_versions[i] THEN
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
                    version = CASE
                        WHEN v_row.tat_us = p_admitted_us[i] AND v_row.tat_rem = p_admitted_rem[i]
                            THEN v_row.version
                        ELSE v_row.version + 1
                    END,
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

-- Resets: delete the counter (freeing its ledger slot through the delete
-- trigger) and report whether it was live. The advisory lock orders a reset
-- with admissions of the same counter.
CREATE FUNCTION runlimit_reset_fixed_windows(
    p_key bytea,
    p_lock_id bigint,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_live boolean;
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    IF p_relaxed_durability THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(p_lock_id);
    DELETE FROM runlimit_fixed_windows AS w
    WHERE w.counter_key = p_key
    RETURNING w.window_expires_at > pg_catalog.clock_timestamp() AND w.used > 0 INTO v_live;
    RETURN coalesce(v_live, false);
END;
$$;

CREATE FUNCTION runlimit_reset_gcra(
    p_key bytea,
    p_lock_id bigint,
    p_lock_timeout_ms integer,
    p_relaxed_durability boolean
) RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_live boolean;
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    IF p_relaxed_durability THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(p_lock_id);
    DELETE FROM runlimit_gcra AS g
    WHERE g.counter_key = p_key
    RETURNING g.expires_at > pg_catalog.clock_timestamp() INTO v_live;
    RETURN coalesce(v_live, false);
END;
$$;
