-- Issue 25 (findings 2 and 3): every store is keyed by tenant space.

-- Blobs: one row per (space, sha256). A record may reference only its own space's blob;
-- another space's hash is looked up by the same (space_id, sha256) key as a hash nobody
-- stored and is refused alike (``blob_missing``). No dedup across spaces: a shared
-- content row would answer an upload of content another space stored faster than a new
-- one (ON CONFLICT skips the write), which is the same guess-testing oracle.
-- model_calls keep their hashes without a foreign key: the blob's key now includes the
-- session's space, which model_calls do not repeat.
ALTER TABLE model_calls DROP CONSTRAINT IF EXISTS model_calls_final_input_sha256_fkey;
ALTER TABLE model_calls DROP CONSTRAINT IF EXISTS model_calls_response_sha256_fkey;
ALTER TABLE blobs DROP CONSTRAINT blobs_pkey;
ALTER TABLE blobs ADD COLUMN space_id text;
-- An existing blob goes to every space whose records or model calls reference it; one
-- nobody references yet cannot be attributed and is dropped (an upload in flight while
-- this runs is refused as missing: upload again).
INSERT INTO blobs (space_id, sha256, content, length, media_type, token_count,
                   token_method, created_at)
SELECT o.space_id, b.sha256, b.content, b.length, b.media_type, b.token_count,
       b.token_method, b.created_at
FROM blobs b JOIN (
    SELECT space_id, content_ref AS sha256 FROM records WHERE content_ref IS NOT NULL
    UNION
    SELECT s.space_id, c.final_input_sha256 FROM model_calls c JOIN sessions s USING (session_id)
    UNION
    SELECT s.space_id, c.response_sha256 FROM model_calls c JOIN sessions s USING (session_id)
    WHERE c.response_sha256 IS NOT NULL
) o ON o.sha256 = b.sha256
WHERE b.space_id IS NULL;
DELETE FROM blobs WHERE space_id IS NULL;
ALTER TABLE blobs ALTER COLUMN space_id SET NOT NULL;
ALTER TABLE blobs ADD PRIMARY KEY (space_id, sha256);

-- Calibration per (space, model profile): a profile name is free text, so another
-- space's usage reports under the same name must not move this space's estimates. The
-- rows of before cannot be attributed; Prepare seeds each (space, model) again at start
-- from its last reported calls (model_gateway.seed_calibration).
DELETE FROM model_calibration;
ALTER TABLE model_calibration DROP CONSTRAINT model_calibration_pkey;
ALTER TABLE model_calibration ADD COLUMN space_id text NOT NULL;
ALTER TABLE model_calibration ADD PRIMARY KEY (space_id, model);

-- Session ids per space (finding 4): ``session_name`` is the id a caller chose, unique in
-- its space; ``session_id`` stays the global key every table, the processor and the
-- Kafka partitioning use. A name free globally is its own session_id (every session of
-- before, and every first-comer); a name another space already took gets a
-- server-assigned session_id, so one space can no longer squat another's ids. Prepare
-- resolves an id a caller sends within the caller's space (storage/sessions.resolve).
ALTER TABLE sessions ADD COLUMN session_name text;
UPDATE sessions SET session_name = session_id;
CREATE UNIQUE INDEX sessions_space_name ON sessions (space_id, session_name);
