-- Issue 37: the other large values the hot paths write, compressed with lz4 where the
-- server has it (027 did this for prepared contexts): a summary revision's body, text and
-- covered ids (the processor commits one per compaction), a compaction's saved outcome
-- (the encoded event, with the summary), a record's inline content and payload (a tool
-- result near TOAST's ~2 KB threshold), a view's kept render state and a stored blob.
-- pglz's compression was the busiest backend's largest function at 48 agents. Rows
-- already written keep their compression; a server built without lz4 keeps pglz.
DO $$
BEGIN
    IF 'lz4' = ANY (SELECT unnest(enumvals) FROM pg_settings
                    WHERE name = 'default_toast_compression') THEN
        ALTER TABLE summary_revisions ALTER COLUMN summary SET COMPRESSION lz4,
            ALTER COLUMN summary_text SET COMPRESSION lz4,
            ALTER COLUMN covered_record_ids SET COMPRESSION lz4;
        ALTER TABLE compaction_operations ALTER COLUMN outcome SET COMPRESSION lz4;
        ALTER TABLE records ALTER COLUMN content_inline SET COMPRESSION lz4,
            ALTER COLUMN payload SET COMPRESSION lz4;
        ALTER TABLE render_states ALTER COLUMN state SET COMPRESSION lz4;
        ALTER TABLE blobs ALTER COLUMN content SET COMPRESSION lz4;
    END IF;
END
$$;
