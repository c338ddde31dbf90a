-- Issue 13: Prepare is stateless between calls, so any instance behind one address can
-- serve a session's model call and its usage report.

-- What the gateway's final check (R10.5) needs of one prepared context: written by the
-- instance that prepared it before it answers, read by whichever instance gets the call.
-- ``body`` is the JSON of services/prepare/prepared.py (messages, tools, budget report,
-- protected block manifest, profile, dependency versions); TOAST compresses it.
-- Bounded retention: every Prepare instance deletes rows older than
-- ALC_PREPARED_RETENTION_H (default 24 h); a call for a pruned context is
-- ``prepared_not_found`` (prepare again), and a call already checked is answered from
-- ``model_calls``, which keeps the durable record.
CREATE TABLE prepared_contexts (
    prepared_id text PRIMARY KEY,
    session_id  text NOT NULL,
    run_id      text NOT NULL,
    body        bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX prepared_contexts_created_at ON prepared_contexts (created_at);

-- R6.4: one calibration per model (the EWMA of reported over estimated input tokens),
-- folded in under this row's lock in the transaction that claims the usage report, so
-- every instance reads the same factor and no report is lost to a concurrent one.
CREATE TABLE model_calibration (
    model      text PRIMARY KEY,
    factor     double precision NOT NULL DEFAULT 1.0,
    samples    integer NOT NULL DEFAULT 0,
    last_drift double precision NOT NULL DEFAULT 0.0,
    updated_at timestamptz NOT NULL DEFAULT now()
);
