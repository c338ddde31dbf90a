-- Issue 25 (finding 5): a grant can be revoked. The live grants stay in session_grants,
-- so every reader (Prepare, the console) is right without a filter; a revoked grant
-- leaves it in the same transaction that records here who revoked it, with which key.
CREATE TABLE session_grant_revocations (
    session_id      text NOT NULL REFERENCES sessions,
    actor_id        text NOT NULL,
    granted_by      text NOT NULL,
    granted_by_key  text,
    granted_at      timestamptz NOT NULL,
    revoked_by      text NOT NULL,
    revoked_by_key  text,
    revoked_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX session_grant_revocations_session ON session_grant_revocations (session_id);
