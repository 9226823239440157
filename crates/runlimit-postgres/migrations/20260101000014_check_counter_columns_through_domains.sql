-- The counter tables' column checks move from table CHECK constraints to
-- domains, with the same conditions.
--
-- PostgreSQL 15 checks a table's CHECK constraints on every row an UPDATE
-- writes, and on every execution of the statement it first reads each
-- constraint's expression back from the catalog and plans it: about 32,000
-- instructions per statement for the two constraints of
-- `runlimit_fixed_windows`, a sixth of a single check's in-place `UPDATE`
-- (counted with callgrind, BENCHMARKS.md), although the update never changes
-- the key and only ever adds to the count. A domain's check is taken from
-- the session's type cache and runs only when a value is assigned to a
-- column of that type: the key's on insert, the counts' on every write of
-- them, as before. Net, a single check's statement runs about 190,000 →
-- 167,000 instructions, a batch of two's 275,000 → 253,000.
--
-- The columns change type to domains without constraints first, which
-- PostgreSQL does in the catalog alone (no rewrite of the tables or their
-- indexes), and the domains get their constraints after, as NOT VALID: they
-- hold for every value written from then on, and the stored rows need no
-- scan, since the table constraints dropped in the same transaction held
-- the same conditions for them.

CREATE DOMAIN runlimit_counter_key AS bytea;
CREATE DOMAIN runlimit_nonnegative_bigint AS bigint;
CREATE DOMAIN runlimit_sliding_counts AS bigint[];

ALTER TABLE runlimit_fixed_windows
    DROP CONSTRAINT runlimit_fixed_windows_counter_key_check,
    DROP CONSTRAINT runlimit_fixed_windows_used_check,
    ALTER COLUMN counter_key TYPE runlimit_counter_key,
    ALTER COLUMN used TYPE runlimit_nonnegative_bigint;

ALTER TABLE runlimit_gcra
    DROP CONSTRAINT runlimit_gcra_counter_key_check,
    DROP CONSTRAINT runlimit_gcra_tat_rem_check,
    ALTER COLUMN counter_key TYPE runlimit_counter_key,
    ALTER COLUMN tat_rem TYPE runlimit_nonnegative_bigint;

ALTER TABLE runlimit_sliding_windows
    DROP CONSTRAINT runlimit_sliding_windows_counter_key_check,
    DROP CONSTRAINT runlimit_sliding_windows_counts_check,
    ALTER COLUMN counter_key TYPE runlimit_counter_key,
    ALTER COLUMN counts TYPE runlimit_sliding_counts;

ALTER DOMAIN runlimit_counter_key
    ADD CONSTRAINT runlimit_counter_key_length CHECK (pg_catalog.octet_length(VALUE) = 64) NOT VALID;
ALTER DOMAIN runlimit_nonnegative_bigint
    ADD CONSTRAINT runlimit_nonnegative_bigint_check CHECK (VALUE >= 0) NOT VALID;
ALTER DOMAIN runlimit_sliding_counts
    ADD CONSTRAINT runlimit_sliding_counts_cardinality CHECK (pg_catalog.cardinality(VALUE) = 9) NOT VALID;
