-- Issue 25 (finding 8): every letter `agentloom dlq replay` looked at, who ran it and what
-- became of the letter. A replay writes a letter's row ('replaying') before it sends the
-- original, and settles it after ('replayed', or 'failed'); a refused letter is written
-- as 'refused' with its reason code. A row is settled once and never deleted: a
-- 'replaying' row left behind is a replay that stopped between the send and the answer.
CREATE TABLE dlq_replays (
    replay_id         text NOT NULL,        -- one run of the command
    letter_ref        text NOT NULL,        -- PARTITION:OFFSET on the dead-letter topic
    dead_letter_topic text NOT NULL,
    source_topic      text NOT NULL,        -- as the letter names it (not trusted)
    source_partition  integer NOT NULL,
    source_offset     bigint NOT NULL,
    session_id        text,
    event_key         text,
    reason_code       text NOT NULL,        -- why the letter was dead-lettered
    value_sha256      text NOT NULL,        -- of the letter's value bytes
    outcome           text NOT NULL,        -- replaying | replayed | refused | failed
    code              text,                 -- why refused or failed
    detail            text,
    os_user           text NOT NULL,        -- who ran the command on the host
    principal         text NOT NULL,        -- the broker principal it replayed as
    host              text NOT NULL,
    replayed_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (replay_id, letter_ref)
);
CREATE INDEX dlq_replays_source ON dlq_replays (source_topic, source_partition, source_offset);
