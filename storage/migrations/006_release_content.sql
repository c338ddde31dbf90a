-- R1.4 / R17: a release id names one content forever. The content hash covers every
-- content field (agent, instructions, tool catalog, skill bindings, hook bindings, model
-- profile, frozen policy); republishing the id with another hash is `release_conflict`,
-- with the same hash it is the same release (idempotent).
ALTER TABLE releases
    ADD COLUMN hook_bindings jsonb NOT NULL DEFAULT '[]'::jsonb,
    -- sha256 of the canonical JSON (services/prepare/service.py `release_content_hash`).
    -- NULL for releases published before this migration: computed from the row when a
    -- republish has to be compared (SQL cannot reproduce the canonical JSON text).
    ADD COLUMN content_hash text;
