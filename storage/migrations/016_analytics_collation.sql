-- Issue 12: the rollups' text key in the "C" collation (byte order). Every batch of the
-- analytics group upserts tens of thousands of rows through this 9-column primary key;
-- under a libc locale (C.UTF-8 included, before PostgreSQL 17) each text comparison goes
-- through strcoll, and the upsert's index probes and sort cost ~25-50% more. Nothing
-- reads these columns in a linguistic order: they are ids, names and labels.
ALTER TABLE analytics_rollups
    ALTER COLUMN window_name TYPE text COLLATE "C",
    ALTER COLUMN space_id    TYPE text COLLATE "C",
    ALTER COLUMN agent_id    TYPE text COLLATE "C",
    ALTER COLUMN release_id  TYPE text COLLATE "C",
    ALTER COLUMN model       TYPE text COLLATE "C",
    ALTER COLUMN purpose     TYPE text COLLATE "C",
    ALTER COLUMN metric      TYPE text COLLATE "C",
    ALTER COLUMN label       TYPE text COLLATE "C";
