"""``context.compact.before`` / ``context.compact.after`` (R14) for the compaction service.

``before`` may narrow what is covered (keep more records verbatim) and set preferences;
``after`` may patch summary *text* only — which facts exist, their sections and their
source ids are read-only, and the patched draft is validated again. Every hook has a
version (recorded as the source of what it changed) and a timeout; a hook that fails or
times out fails the job at stage ``hooks`` and the old view stays (R15.3).

Which hooks run is the session's release's choice (R14, R17, R1.4), by the contract both
hook runners share (services/hooks.py): exactly the hooks its policy's ``hook_bindings``
bind at each point, in binding order, each under its own timeout. A binding no loaded hook
answers fails the job at stage ``hooks`` (``hook_not_loaded:<id>``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from domain.compaction.core.steps import HOOK_AFTER, HOOK_BEFORE
from domain.compaction.drafts import SummaryDraft
from domain.compaction.errors import InvalidSummary
from domain.policy.sections import HookBinding
from schemas.errors import HookFailed
from services.hooks import bound, call

BEFORE, AFTER = HOOK_BEFORE, HOOK_AFTER


@dataclass(frozen=True)
class BeforeCompact:
    session_id: str
    run_id: str
    candidate_record_ids: tuple[str, ...]  # what selection would cover, in order
    trigger_reasons: tuple[str, ...]


@dataclass(frozen=True)
class BeforeDecision:
    keep_record_ids: frozenset[str] = frozenset()  # narrow: these stay verbatim
    max_output_tokens: int | None = None  # preference: a tighter summary


@dataclass(frozen=True)
class AfterCompact:
    session_id: str
    run_id: str
    draft: SummaryDraft


class CompactHook(Protocol):
    name: str
    version: str
    timeout_s: float

    async def before(self, ctx: BeforeCompact) -> BeforeDecision: ...

    async def after(self, ctx: AfterCompact) -> SummaryDraft: ...


@dataclass
class HookChain:
    hooks: Sequence[CompactHook] = field(default_factory=tuple)

    def bound(self, point: str, bindings: Sequence[HookBinding]) -> list[CompactHook]:
        """The loaded hooks the release binds at ``point``, in binding order."""
        return bound(self.hooks, point, bindings, "before" if point == BEFORE else "after")

    async def before(self, ctx: BeforeCompact, bindings: Sequence[HookBinding]) -> BeforeDecision:
        keep: set[str] = set()
        max_out: int | None = None
        for h in self.bound(BEFORE, bindings):
            d: BeforeDecision = await call(h, "before", BEFORE, ctx)
            keep |= d.keep_record_ids & set(ctx.candidate_record_ids)
            if d.max_output_tokens is not None:
                max_out = min(max_out or d.max_output_tokens, d.max_output_tokens)
        return BeforeDecision(frozenset(keep), max_out)

    async def after(self, ctx: AfterCompact, bindings: Sequence[HookBinding]) -> SummaryDraft:
        draft = ctx.draft
        for h in self.bound(AFTER, bindings):
            patched: SummaryDraft = await call(
                h, "after", AFTER, AfterCompact(ctx.session_id, ctx.run_id, draft)
            )
            check_text_only(draft, patched, h.name)
            draft = patched
        return draft

    def versions(self) -> tuple[str, ...]:
        return tuple(f"{h.name}@{h.version}" for h in self.hooks)


def check_text_only(before: SummaryDraft, after: SummaryDraft, hook: str) -> None:
    """R14: an ``after`` hook may reword statements; it may not add, drop or move facts,
    change their sources, or touch artifact references."""
    for (name, old), (_, new) in zip(before.sections(), after.sections(), strict=True):
        if len(old) != len(new) or any(
            a.source_ids != b.source_ids for a, b in zip(old, new, strict=True)
        ):
            raise InvalidSummary(
                f"hook {hook} changed the facts or sources of {name}",
                reason="hook_changed_structure",
                hook=hook,
                field=name,
            )
    if before.work_artifact_refs != after.work_artifact_refs:
        raise InvalidSummary(
            f"hook {hook} changed artifact references", reason="hook_changed_structure", hook=hook
        )


def failure_reason(exc: HookFailed, failed: str) -> str:
    """A job's reason when a hook failed: ``hook_not_loaded:<id>`` for a binding no loaded
    hook answers, otherwise ``<failed>:<reason>`` (``timeout`` or the hook's exception type)."""
    if exc.details.get("reason") == "hook_not_loaded":
        return f"hook_not_loaded:{exc.details['hook']}"
    return f"{failed}:{exc.details.get('reason')}"
