-- TRUNCATE fires no row triggers, so without this the capacity ledger would
-- keep counting rows that no longer exist: a truncated table would deny every
-- new key in a shard that was full, and cleanup could never free it.
-- A statement-level TRUNCATE trigger zeroes the table's ledger rows instead.
-- TRUNCATE holds the table exclusively, so no admission can insert or delete
-- a row of it between the truncation and this update.
-- Every counter table carries three ledger triggers: inserts, deletes and
-- truncation, each naming its ledger rows by the trigger argument.
CREATE FUNCTION runlimit_ledger_count_truncate() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE runlimit_capacity_ledger AS ledger
    SET used = 0
    WHERE ledger.counter_table = TG_ARGV[0] AND ledger.used <> 0;
    RETURN NULL;
END;
$$;

CREATE TRIGGER runlimit_fixed_windows_count_truncate
    AFTER TRUNCATE ON runlimit_fixed_windows
    FOR EACH STATEMENT EXECUTE FUNCTION runlimit_ledger_count_truncate('fixed_windows');

CREATE TRIGGER runlimit_gcra_count_truncate
    AFTER TRUNCATE ON runlimit_gcra
    FOR EACH STATEMENT EXECUTE FUNCTION runlimit_ledger_count_truncate('gcra');
