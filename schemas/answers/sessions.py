"""Answers of releases (R1.4, R17), sessions, runs and event outcomes (R1)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class ReleasePublished(BaseModel):
    """A publish's answer: the release's id, its policy revision, content hash and the
    input budget its model profile leaves."""

    model_config = ConfigDict(extra="forbid")

    release_id: str
    policy_revision: str
    content_hash: str
    input_budget: int


class Release(BaseModel):
    """A stored release, every column: its frozen content, its effective policy and the
    overrides given at publish (None for releases published before they were kept)."""

    model_config = ConfigDict(extra="forbid")

    release_id: str
    agent_id: str
    instructions: str
    tool_catalog: list[dict[str, Any]]
    skill_bindings: list[dict[str, Any]]
    hook_bindings: list[dict[str, Any]]
    model_profile: dict[str, Any]
    context_policy: dict[str, Any]
    policy_revision: str
    content_hash: str | None
    space_id: str | None
    frozen_at: str
    policy_overrides: dict[str, Any] | None = None


class Session(BaseModel):
    """A session as the processor last committed it. ``session_id`` is the global key;
    ``session_name`` the id its opener chose (unique in its space)."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    space_id: str
    actor_id: str
    release_id: str
    active_run_id: str | None
    revision: int
    user_turns: int
    model_steps: int
    last_sequence: int
    session_name: str | None = None


class RunSnapshot(BaseModel):
    """The run's immutable history snapshot (R2.1)."""

    model_config = ConfigDict(extra="forbid")

    snapshot_id: int
    through_session_sequence: int
    policy_revision: str


class RunStarted(BaseModel):
    """A started run: its main thread and snapshot."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    run_id: str
    instance_id: str
    status: str
    snapshot: RunSnapshot


class RunLifecycle(BaseModel):
    """A resume, finish or cancel the processor accepted: the run's status after it and
    where its event was committed."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    run_id: str
    instance_id: str
    status: str | None
    event_key: str
    partition: int
    offset: int


class EventOutcome(BaseModel):
    """What became of an event: ``committed`` (with its record's id, sequences and
    kind), ``rejected`` / ``dead_letter`` (with the refusal's code and message: every
    refusal of an event of this session's own space and actor is recorded, at admission,
    authentication or planning), or ``unknown`` (not processed yet; asked with the
    append's partition and offset, an append the processor passed unattributed is
    ``dead_letter`` ``not_applied``)."""

    model_config = ConfigDict(extra="allow")

    outcome: str
    record_id: str | None = None
    session_sequence: int | None = None
    instance_sequence: int | None = None
    kind: str | None = None
    code: str | None = None
    message: str | None = None
