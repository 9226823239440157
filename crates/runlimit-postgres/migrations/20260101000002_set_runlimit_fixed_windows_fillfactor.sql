-- Leave room on each page for HOT updates of `used`: most admissions update a
-- row in place without touching its indexes.
ALTER TABLE runlimit_fixed_windows SET (fillfactor = 80);
