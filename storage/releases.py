"""Releases (R1.4, R17): frozen once published, so a stored row becomes a frozen
``Release`` whose policy is parsed once, here, and never again by its readers."""

from __future__ import annotations

from typing import Any, Protocol, TypedDict

import asyncpg
from pydantic import ConfigDict, Field, InstanceOf

from domain.policy.context_policy import ContextPolicy
from domain.policy.parsed import policy_of
from schemas.answers import sessions as answers


class ReleaseContent(TypedDict):
    """What a release freezes (``RELEASE_CONTENT``), as published and hashed: the tools,
    bindings, profile and policy stay the JSON they were given as."""

    agent_id: str
    instructions: str
    tool_catalog: list[dict[str, Any]]
    skill_bindings: list[dict[str, Any]]
    hook_bindings: list[dict[str, Any]]
    model_profile: dict[str, Any]
    context_policy: dict[str, Any]


# Every field a release freezes (R1.4, R17), in column order: one differing field is
# another release.
RELEASE_CONTENT: tuple[str, ...] = tuple(ReleaseContent.__annotations__)


class Release(answers.Release):
    """A stored release: the published one (``schemas.answers.sessions.Release``, every
    column) and its policy, parsed from ``context_policy`` once, at load: releases are
    frozen (R17). The parsed policy is never part of the answer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: InstanceOf[ContextPolicy] = Field(exclude=True, repr=False)

    def content(self) -> ReleaseContent:
        """The frozen content fields, as published."""
        return ReleaseContent(
            agent_id=self.agent_id,
            instructions=self.instructions,
            tool_catalog=self.tool_catalog,
            skill_bindings=self.skill_bindings,
            hook_bindings=self.hook_bindings,
            model_profile=self.model_profile,
            context_policy=self.context_policy,
        )


def release_from_row(row: Any) -> Release:
    return Release(
        release_id=row["release_id"],
        agent_id=row["agent_id"],
        instructions=row["instructions"],
        tool_catalog=row["tool_catalog"],
        skill_bindings=row["skill_bindings"],
        hook_bindings=row["hook_bindings"],
        model_profile=row["model_profile"],
        context_policy=row["context_policy"],
        policy_revision=row["policy_revision"],
        content_hash=row["content_hash"],
        space_id=row["space_id"],
        frozen_at=row["frozen_at"].isoformat(),
        policy=policy_of(row["policy_revision"], row["context_policy"]),
        policy_overrides=row["policy_overrides"],
    )


class Releases(Protocol):
    """Port: the release store."""

    async def insert(
        self,
        release_id: str,
        content: ReleaseContent,
        policy_revision: str,
        content_hash: str,
        space_id: str | None,
        overrides: dict[str, Any] | None = None,
    ) -> bool:
        """Store a new release (and the overrides it was published with); False when the
        id exists (nothing written)."""

    async def get(self, release_id: str) -> Release | None:
        """The stored release, or None."""

    async def backfill_content_hash(self, release_id: str, content_hash: str) -> None:
        """Set the hash of a release published before it was stored (migration 006)."""


class PgReleases:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def insert(
        self,
        release_id: str,
        content: ReleaseContent,
        policy_revision: str,
        content_hash: str,
        space_id: str | None,
        overrides: dict[str, Any] | None = None,
    ) -> bool:
        row = await self.pool.fetchrow(
            "INSERT INTO releases (release_id, agent_id, instructions, tool_catalog,"
            " skill_bindings, hook_bindings, model_profile, context_policy, policy_revision,"
            " content_hash, space_id, policy_overrides)"
            " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)"
            " ON CONFLICT (release_id) DO NOTHING RETURNING release_id",
            release_id,
            *(content.get(k) for k in RELEASE_CONTENT),
            policy_revision,
            content_hash,
            space_id,
            overrides,
        )
        return row is not None

    async def get(self, release_id: str) -> Release | None:
        row = await self.pool.fetchrow("SELECT * FROM releases WHERE release_id=$1", release_id)
        return None if row is None else release_from_row(row)

    async def backfill_content_hash(self, release_id: str, content_hash: str) -> None:
        await self.pool.execute(
            "UPDATE releases SET content_hash=$2 WHERE release_id=$1 AND content_hash IS NULL",
            release_id,
            content_hash,
        )
