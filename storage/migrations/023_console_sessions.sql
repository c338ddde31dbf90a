-- Issue 25 (finding 9): the web console's server-side sessions. The browser holds only an
-- opaque random id (HttpOnly cookie); a row is found by the id's sha256, so the table
-- alone names no live cookie. The user's API key (what the console needs to call Prepare
-- with) is sealed under a key derived from that id: a copy of this table is no key.
CREATE TABLE console_sessions (
    id_hash     bytea PRIMARY KEY,
    sealed_key  bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    seen_at     timestamptz NOT NULL DEFAULT now(),
    -- absolute end; the idle end is seen_at + the console's idle timeout
    expires_at  timestamptz NOT NULL
);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);
