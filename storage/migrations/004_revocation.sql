-- R11.8/R15.3: revoking a resource invalidates the summaries derived from it and
-- withdraws its content from every view; the source records themselves stay.
ALTER TABLE records ADD COLUMN resource_ref text;  -- the resource a record derives from
CREATE INDEX records_resource ON records (session_id, resource_ref)
    WHERE resource_ref IS NOT NULL;

CREATE TABLE revoked_resources (
    session_id       text NOT NULL,
    resource_id      text NOT NULL,
    revoked_sequence bigint NOT NULL,
    PRIMARY KEY (session_id, resource_id)
);
