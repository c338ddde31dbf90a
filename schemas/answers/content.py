"""Answers of read-back, grants and the content store (R3.3, R3.4, R11.8, R13.2)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class RecordPage(BaseModel):
    """One page of a source record read back by id, by character offset;
    ``next_offset`` is None on the last page. A revoked resource's content reads as
    withdrawn; a retracted record stays readable (``retracted_by``: the retraction)."""

    model_config = ConfigDict(extra="forbid")

    record_id: str
    session_sequence: int
    run_id: str | None
    instance_id: str | None
    kind: str
    authority: str
    payload: Any
    content_sha256: str | None
    content: str
    offset: int
    total_chars: int
    next_offset: int | None
    retracted: bool
    retracted_by: str | None


class Grant(BaseModel):
    """A read grant given; ``granted_by`` is derived from the key."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    actor_id: str
    granted: bool
    granted_by: str


class GrantRevoked(BaseModel):
    """A grant taken back; ``revoked``: there was one."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    actor_id: str
    revoked: bool
    revoked_by: str


class Blob(BaseModel):
    """Content stored in the key's space, by its SHA-256, with its token count."""

    model_config = ConfigDict(extra="forbid")

    sha256: str
    length: int
    token_count: int
    token_method: str
