"""Releases (R1.4, R15.4, R17): publish once, frozen; read as their space sees them.

Releases are frozen and a session's release never changes (R1.4): both lookups are cached
for the life of the process, which takes two queries off every prepare.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from domain.policy.context_policy import ContextPolicy, validate_policy
from domain.window.model_catalog import ModelCatalog, check_refs
from schemas.answers.sessions import ReleasePublished
from schemas.errors import InvalidPolicy, NotFound, ReleaseConflict
from services.model_profiles import model_profile
from services.prepare.bodies import ReleaseIn
from services.prepare.release_spec import ReleaseView, view_of
from storage.releases import RELEASE_CONTENT, Release, ReleaseContent, Releases


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def policy_revision(policy: dict[str, Any]) -> str:
    canon = json.dumps(policy, sort_keys=True, separators=(",", ":"))
    return "pol_" + hashlib.sha256(canon.encode()).hexdigest()[:16]


def release_content_hash(content: ReleaseContent) -> str:
    """sha256 of the canonical JSON of a release's content fields."""
    return hashlib.sha256(
        _canonical({k: content.get(k) for k in RELEASE_CONTENT}).encode()
    ).hexdigest()


@dataclass
class ReleaseBook:
    releases: Releases
    # the release id of a session (sessions never change release): from the session store.
    release_of_session: Callable[[str], Awaitable[str]]
    counting_method: str  # the tokenizer's, for R6.4's check at publish
    # R14/R17: the hook ids (name@version) this deployment loads, Prepare's and the
    # compaction service's; a policy binding any other is refused at publish.
    known_hooks: Collection[str] = ()
    # R17: the named profiles and platform limits a policy may reference (model_catalog).
    catalog: ModelCatalog = field(default_factory=ModelCatalog)
    _releases: dict[str, Release] = field(default_factory=dict)
    _views: dict[str, ReleaseView] = field(default_factory=dict)
    _session_release: dict[str, str] = field(default_factory=dict)

    async def register(self, body: ReleaseIn, space_id: str | None = None) -> ReleasePublished:
        """``space_id``: the publishing key's space, which owns the release (R15.4)."""
        # R6.1/R6.4/R6.5 and the provider format: what every prepare and model call of
        # the release needs of its profile, refused here (release_spec.model_profile).
        profile = model_profile(body.model_profile, self.counting_method)
        # R7.7/R17: validated and frozen at publish; stored with every default made
        # explicit so that a later change of platform defaults never alters it.
        parsed = _policy(body.context_policy, self.known_hooks)
        _check_refs(parsed, profile.name, self.catalog)
        policy = parsed.to_dict()
        rev = policy_revision({"policy": policy, "model_profile": body.model_profile})
        # Tools, skills and hooks were parsed by the request model, with the types a
        # prepare reads them with; stored as given.
        content = ReleaseContent(
            agent_id=body.agent_id,
            instructions=body.instructions,
            tool_catalog=[t.wire() for t in body.tool_catalog],
            skill_bindings=[b.wire() for b in body.skill_bindings],
            hook_bindings=[
                h.model_dump(mode="json", exclude_unset=True) for h in body.hook_bindings
            ],
            model_profile=body.model_profile,
            context_policy=policy,
        )
        digest = release_content_hash(content)
        release_id = body.release_id or f"rel_{uuid.uuid4().hex[:12]}"
        overrides = body.context_policy
        if not await self.releases.insert(release_id, content, rev, digest, space_id, overrides):
            # the id exists: the same content is the same release (a retry, answered
            # alike); any other content is refused, never applied to sessions in flight.
            existing = await self.get(release_id)
            await self._check_same(existing, content, digest, space_id)
            rev, digest = existing.policy_revision, existing.content_hash or digest
        return ReleasePublished(
            release_id=release_id,
            policy_revision=rev,
            content_hash=digest,
            input_budget=profile.input_budget(),
        )

    async def _check_same(
        self, existing: Release, content: ReleaseContent, digest: str, space_id: str | None
    ) -> None:
        release_id = existing.release_id
        if existing.space_id not in (None, space_id):
            # Ids are global: another space's release is named by nothing but "taken".
            raise ReleaseConflict(
                f"release id {release_id} is taken; publish under another id",
                release_id=release_id,
            )
        # A release published before the whole ContextPolicy (R17) stored fewer sections:
        # compared as its policy reads now (the missing sections are their defaults), the
        # same body republished is the same release.
        stored = existing.content()
        stored["context_policy"] = existing.policy.to_dict()
        if existing.content_hash != digest and release_content_hash(stored) != digest:
            differ = [
                k
                for k in RELEASE_CONTENT
                if _canonical(stored.get(k)) != _canonical(content.get(k))
            ]
            raise ReleaseConflict(
                f"release {release_id} is frozen with other content"
                f" ({', '.join(differ) or 'content hash'} differ); publish a new release id",
                release_id=release_id,
                fields=differ,
            )
        if existing.content_hash is None:  # published before migration 006
            await self.releases.backfill_content_hash(release_id, digest)

    async def get(self, release_id: str) -> Release:
        """The stored release as published (readable even if no prepare can use it)."""
        cached = self._releases.get(release_id)
        if cached is not None:
            return cached
        rel = await self.releases.get(release_id)
        if rel is None:
            raise NotFound(f"release {release_id} not found")
        self._releases[release_id] = rel
        return rel

    async def view(self, release_id: str) -> ReleaseView:
        """The release parsed as a prepare reads it (``release_spec.view_of``): one that
        no prepare could use is refused (422) when a session opens on it or prepares."""
        cached = self._views.get(release_id)
        if cached is None:
            rel = await self.get(release_id)
            cached = self._views[release_id] = view_of(rel, self.counting_method)
        return cached

    async def of_session(self, sid: str) -> ReleaseView:
        release_id = self._session_release.get(sid)
        if release_id is None:
            release_id = self._session_release[sid] = await self.release_of_session(sid)
        return await self.view(release_id)


def _policy(raw: dict[str, Any], known_hooks: Collection[str]) -> ContextPolicy:
    """The policy's refusals name their path in the policy (``details.path``, as the
    settings page shows it) and in the release (``details.json_path``)."""
    try:
        return validate_policy(raw, known_hooks=known_hooks)
    except InvalidPolicy as exc:
        inner = exc.details.get("path")
        exc.details.setdefault(
            "json_path", f"context_policy.{inner}" if inner else "context_policy"
        )
        raise


def _check_refs(policy: ContextPolicy, own_profile: str, catalog: ModelCatalog) -> None:
    try:
        check_refs(policy, own_profile, catalog)
    except InvalidPolicy as exc:
        exc.details.setdefault("json_path", f"context_policy.{exc.details['path']}")
        raise
