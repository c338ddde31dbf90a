-- R15.4: callers authenticate with API keys of one tenant space. Only the sha256 of a key
-- is stored (a key carries 256 random bits, so a fast hash is enough); the key itself is
-- shown once, when it is created (agentloom-keys create).
CREATE TABLE api_keys (
    key_id      text PRIMARY KEY,           -- the public part of the key, for lookup
    key_sha256  text NOT NULL,
    space_id    text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('host', 'user')),
    actor_id    text,                       -- the one actor of a user key
    label       text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz,
    CHECK ((kind = 'user') = (actor_id IS NOT NULL))
);

-- Releases belong to the space that published them; NULL: published before keys
-- existed, readable and usable by every space.
ALTER TABLE releases ADD COLUMN space_id text;

-- Who granted is derived from the credential, never named by the request; the key that
-- made the grant is kept for audit.
ALTER TABLE session_grants ADD COLUMN granted_by_key text;
