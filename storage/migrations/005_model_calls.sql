-- R15.1: the model call record. One row per prepared context sent through the gateway:
-- what was prepared (dependency versions, protected block manifest, budget), the exact
-- final input (an immutable blob of the provider request), the tool catalog version, the
-- model configuration, hooks that ran, and — once the runtime reports it — the response
-- reference, the provider's usage and the estimate's drift (R6.4 calibration).
CREATE TABLE model_calls (
    call_id               text PRIMARY KEY,
    prepared_id           text NOT NULL UNIQUE,
    session_id            text NOT NULL,
    run_id                text NOT NULL,
    instance_id           text NOT NULL,
    purpose               text NOT NULL,
    status                text NOT NULL,  -- ready | completed
    model                 text NOT NULL,
    final_input_sha256    text NOT NULL REFERENCES blobs (sha256),
    tool_catalog_version  text NOT NULL,
    model_config          jsonb NOT NULL,
    dependency_versions   jsonb NOT NULL,
    manifest              jsonb NOT NULL,
    budget                jsonb NOT NULL,
    hook_versions         text[] NOT NULL,
    response_sha256       text REFERENCES blobs (sha256),
    usage                 jsonb,
    drift                 jsonb,
    created_at            timestamptz NOT NULL DEFAULT now(),
    completed_at          timestamptz
);
CREATE INDEX model_calls_session ON model_calls (session_id, run_id, created_at);
CREATE INDEX model_calls_model ON model_calls (model, completed_at DESC)
    WHERE usage IS NOT NULL;
