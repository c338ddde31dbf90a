-- Issue 28 item 4 (R18, R4.2): what each model call saw, stored when the call is recorded
-- (storage/call_views.py): its blocks in order with the role each was sent with, as one
-- zstd-compressed JSON document. A past call's view is read from here, never rebuilt
-- from today's records; it goes with its call and is pruned like prepared contexts.
CREATE TABLE call_views (
    call_id     text PRIMARY KEY REFERENCES model_calls (call_id) ON DELETE CASCADE,
    session_id  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    body        bytea NOT NULL
);
CREATE INDEX call_views_created ON call_views (created_at);
