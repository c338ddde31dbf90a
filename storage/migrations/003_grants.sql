-- R3.3/R15.4: another actor reads a session only through an explicit grant.
CREATE TABLE session_grants (
    session_id  text NOT NULL REFERENCES sessions,
    actor_id    text NOT NULL,
    granted_by  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, actor_id)
);
