-- Analytics rollups (issue 12, SPEC R18): tumbling windows of ctx.observability and the
-- dead-letter topic, written only by the analytics consumer group.

CREATE TABLE analytics_rollups (
    window_name  text NOT NULL,            -- 1m | 1h
    bucket_start timestamptz NOT NULL,     -- start of the tumbling window (event time)
    space_id     text NOT NULL,            -- '' when unknown (a dead letter without session)
    agent_id     text NOT NULL,
    release_id   text NOT NULL,
    model        text NOT NULL,
    purpose      text NOT NULL,
    metric       text NOT NULL,
    label        text NOT NULL,            -- reason / decision / outcome / budget item, or ''
    value        bigint NOT NULL,
    PRIMARY KEY (window_name, space_id, bucket_start, agent_id, release_id, model, purpose,
                 metric, label)
);

-- Tracking: the next offset to apply per consumed partition, written in the same
-- transaction as the increments of the events before it. Offsets of one partition are
-- applied in order, so one row per partition is enough to make a redelivery or a replay
-- from the beginning change nothing (effectively-once, as the processor's consumer_offsets).
CREATE TABLE analytics_offsets (
    consumer    text NOT NULL,
    topic       text NOT NULL,
    partition   integer NOT NULL,
    next_offset bigint NOT NULL,
    PRIMARY KEY (consumer, topic, partition)
);
