"""Compact hooks loaded by the compaction service in tests (ALC_COMPACTION_HOOKS)."""

from __future__ import annotations

import dataclasses

from domain.compaction.drafts import Fact, SummaryDraft
from services.compaction.compact_hooks import AfterCompact, BeforeCompact, BeforeDecision


class TagAndKeep:
    """before: keeps every record whose id is the first candidate; after: prefixes each
    statement with a tag (a permitted text patch)."""

    name = "tag-and-keep"
    version = "7"
    timeout_s = 2.0

    async def before(self, ctx: BeforeCompact) -> BeforeDecision:
        return BeforeDecision(keep_record_ids=frozenset(ctx.candidate_record_ids[:1]))

    async def after(self, ctx: AfterCompact) -> SummaryDraft:
        def tag(facts: tuple[Fact, ...]) -> tuple[Fact, ...]:
            return tuple(Fact(f"[reviewed] {f.statement}", f.source_ids) for f in facts)

        d = ctx.draft
        return dataclasses.replace(
            d, verified_facts=tag(d.verified_facts), failures=tag(d.failures)
        )


def make() -> TagAndKeep:
    return TagAndKeep()
