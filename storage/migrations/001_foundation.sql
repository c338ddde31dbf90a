-- Foundation schema. PostgreSQL is the system of record; Kafka is the transport.

CREATE TABLE releases (
    release_id      text PRIMARY KEY,
    agent_id        text NOT NULL,
    instructions    text NOT NULL,
    tool_catalog    jsonb NOT NULL,
    skill_bindings  jsonb NOT NULL,
    model_profile   jsonb NOT NULL,
    context_policy  jsonb NOT NULL,
    policy_revision text NOT NULL,          -- hash of the frozen policy (R1.4, R17)
    frozen_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE sessions (
    session_id            text PRIMARY KEY,
    space_id              text NOT NULL,
    actor_id              text NOT NULL,
    release_id            text NOT NULL REFERENCES releases,
    next_session_sequence bigint NOT NULL DEFAULT 1,
    active_run_id         text,
    revision              bigint NOT NULL DEFAULT 0,
    user_turns            bigint NOT NULL DEFAULT 0,   -- R8.1 totals, from unique events only
    model_steps           bigint NOT NULL DEFAULT 0,   -- R8.2
    created_at            timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE history_snapshots (
    snapshot_id              bigserial PRIMARY KEY,
    session_id               text NOT NULL REFERENCES sessions,
    run_id                   text NOT NULL,
    through_session_sequence bigint NOT NULL,   -- R2.1 boundary
    policy_revision          text NOT NULL,
    user_turns               bigint NOT NULL,
    model_steps              bigint NOT NULL,
    created_at               timestamptz NOT NULL DEFAULT now(),
    UNIQUE (session_id, run_id)
);

CREATE TABLE runs (
    session_id       text NOT NULL REFERENCES sessions,
    run_id           text NOT NULL,
    main_instance_id text NOT NULL,
    status           text NOT NULL,            -- active | finished | cancelled
    snapshot_id      bigint NOT NULL REFERENCES history_snapshots,
    started_sequence bigint NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    ended_at         timestamptz,
    PRIMARY KEY (session_id, run_id)
);

CREATE TABLE threads (
    session_id             text NOT NULL,
    run_id                 text NOT NULL,
    instance_id            text NOT NULL,
    parent_instance_id     text,
    next_instance_sequence bigint NOT NULL DEFAULT 1,
    revision               bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, run_id, instance_id)
);

CREATE TABLE records (
    session_id        text NOT NULL,
    session_sequence  bigint NOT NULL,
    record_id         text NOT NULL UNIQUE,
    event_key         text NOT NULL,
    space_id          text NOT NULL,
    actor_id          text NOT NULL,
    run_id            text,
    instance_id       text,
    instance_sequence bigint,
    kind              text NOT NULL,
    authority         text NOT NULL,
    visibility        text NOT NULL,
    operation_id      text,
    content_inline    text,
    content_ref       text,
    content_sha256    text NOT NULL,
    content_length    bigint NOT NULL,
    media_type        text NOT NULL,
    payload           jsonb NOT NULL,
    token_count       integer NOT NULL,        -- counted once at ingest (DESIGN: Tokens)
    token_method      text NOT NULL,
    producer          text NOT NULL,
    occurred_at_ms    bigint NOT NULL,
    source_partition  integer NOT NULL,
    source_offset     bigint NOT NULL,
    committed_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, session_sequence),
    -- R3.1: scope + event_key. session_id is globally unique and fixes space and actor,
    -- so it leads the index: the processor's dedupe lookups are (session_id, event_key).
    UNIQUE (session_id, event_key)
);
-- R3.1: a result (scope + operation_id + kind) is never recorded twice.
CREATE UNIQUE INDEX records_operation_once
    ON records (session_id, operation_id, kind) WHERE operation_id IS NOT NULL;
-- Thread views read "records of this thread after sequence N": a range scan on this index.
CREATE INDEX records_thread ON records (session_id, run_id, instance_id, session_sequence);

-- Immutable, content-addressed large content (R3.4), written before the record.
CREATE TABLE blobs (
    sha256       text PRIMARY KEY,
    content      bytea NOT NULL,
    length       bigint NOT NULL,
    media_type   text NOT NULL,
    token_count  integer NOT NULL,
    token_method text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- Why an event did not become a record (refused run start, dead letter). Lets a caller
-- ask what happened to its event_key; written in the same transaction as the batch.
CREATE TABLE event_outcomes (
    session_id   text NOT NULL,
    event_key    text NOT NULL,
    outcome      text NOT NULL,               -- rejected | dead_letter
    code         text NOT NULL,
    message      text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, event_key)
);

-- Consumer tracking (eventsourcing-style): the next offset per partition, committed in
-- the same transaction as the effects, so a restart knows exactly what is done and
-- Prepare can wait for "my append is committed" (read-your-writes).
CREATE TABLE consumer_offsets (
    consumer    text NOT NULL,
    topic       text NOT NULL,
    partition   integer NOT NULL,
    next_offset bigint NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, partition)
);
