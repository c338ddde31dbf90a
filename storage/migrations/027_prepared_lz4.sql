-- Issue 37: every prepare stores its context (storage/calls/prepared_contexts.py), ~45 KB of
-- JSON at a long session's budget, and TOAST compressed it with pglz: ~0.7 ms of the
-- database's CPU a row, the most of any statement Prepare sends. lz4 compresses it in
-- ~0.2 ms, ~6% larger. Rows already written keep their compression; a server built
-- without lz4 keeps pglz.
DO $$
BEGIN
    IF 'lz4' = ANY (SELECT unnest(enumvals) FROM pg_settings
                    WHERE name = 'default_toast_compression') THEN
        ALTER TABLE prepared_contexts ALTER COLUMN body SET COMPRESSION lz4;
    END IF;
END
$$;
