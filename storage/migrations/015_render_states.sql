-- Issue 13 (cold prepare): the render state of a thread view (domain/render_state.py),
-- so that a Prepare instance without the view in memory continues from it and renders
-- only the records committed since. A cache: one row per thread, replaced by a newer
-- state or one of another fingerprint (summary, revocation epoch, settings); deleting it
-- only makes the next prepare render the history again.
CREATE TABLE render_states (
    session_id    text NOT NULL,
    run_id        text NOT NULL,
    instance_id   text NOT NULL,
    fingerprint   text NOT NULL,
    last_sequence bigint NOT NULL,
    state         bytea NOT NULL,
    saved_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, run_id, instance_id)
);
