"""R14: context.compact.before may narrow the range; after may patch text only."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from domain.compaction.drafts import Fact, SummaryDraft
from domain.compaction.errors import InvalidSummary
from domain.policy.sections import HookBinding
from schemas.errors import HookFailed
from services.compaction.compact_hooks import (
    AFTER,
    BEFORE,
    AfterCompact,
    BeforeCompact,
    BeforeDecision,
    HookChain,
    check_text_only,
)

DRAFT = SummaryDraft(
    (Fact("a happened", ("r1",)),), (), (Fact("b failed", ("r2",)),), (), ("src/x.py",), ()
)


class Hook:
    def __init__(
        self,
        keep: frozenset[str] = frozenset(),
        patch: object = None,
        sleep: float = 0.0,
        max_out: int | None = None,
        name: str = "h",
    ) -> None:
        self.name, self.version, self.timeout_s = name, "1", 0.2
        self.keep, self.patch, self.sleep, self.max_out = keep, patch, sleep, max_out

    async def before(self, ctx: BeforeCompact) -> BeforeDecision:
        await asyncio.sleep(self.sleep)
        return BeforeDecision(self.keep, self.max_out)

    async def after(self, ctx: AfterCompact) -> SummaryDraft:
        return self.patch(ctx.draft) if callable(self.patch) else ctx.draft


CTX = BeforeCompact("s", "r", ("r1", "r2", "r3"), ("user_turns",))
BIND = (
    HookBinding(point=BEFORE, hook="h", version="1"),
    HookBinding(point=AFTER, hook="h", version="1"),
)


@pytest.mark.spec("R14")
async def test_before_narrows_only_within_the_candidates_and_takes_the_tightest_output() -> None:
    chain = HookChain((Hook(frozenset({"r2", "zz"}), max_out=300), Hook(max_out=200, name="g")))
    d = await chain.before(CTX, (*BIND, HookBinding(point=BEFORE, hook="g")))
    assert d.keep_record_ids == {"r2"} and d.max_output_tokens == 200


@pytest.mark.spec("R14")
async def test_after_may_reword_statements() -> None:
    reword = Hook(
        patch=lambda d: dataclasses.replace(
            d, verified_facts=(Fact("A happened (reviewed)", ("r1",)),)
        )
    )
    out = await HookChain((reword,)).after(AfterCompact("s", "r", DRAFT), BIND)
    assert out.verified_facts[0].statement == "A happened (reviewed)"


@pytest.mark.spec("R14", "R11.4")
@pytest.mark.parametrize(
    "change",
    [
        lambda d: dataclasses.replace(d, verified_facts=()),
        lambda d: dataclasses.replace(d, failures=(Fact("b failed", ("r9",)),)),
        lambda d: dataclasses.replace(d, work_artifact_refs=()),
        lambda d: dataclasses.replace(d, decisions=(Fact("new decision", ("r1",)),)),
    ],
)
async def test_after_may_not_change_facts_sources_or_artifacts(change: object) -> None:
    with pytest.raises(InvalidSummary) as err:
        await HookChain((Hook(patch=change),)).after(AfterCompact("s", "r", DRAFT), BIND)
    assert err.value.details["reason"] == "hook_changed_structure"


@pytest.mark.spec("R14")
async def test_a_slow_hook_times_out() -> None:
    with pytest.raises(HookFailed) as err:
        await HookChain((Hook(sleep=1.0),)).before(CTX, BIND)
    assert err.value.details["reason"] == "timeout"


def test_check_text_only_accepts_identical_structure() -> None:
    check_text_only(DRAFT, DRAFT, "h")
    assert HookChain((Hook(),)).versions() == ("h@1",)


@pytest.mark.spec("R14", "R17", "R1.4")
async def test_only_the_hooks_the_release_binds_at_a_point_run_in_binding_order() -> None:
    seen: list[str] = []

    def mark(tag: str) -> object:
        return lambda d: seen.append(tag) or d

    chain = HookChain((Hook(patch=mark("h")), Hook(patch=mark("g"), name="g")))
    assert await chain.before(CTX, ()) == BeforeDecision()  # nothing bound: nothing runs
    await chain.after(
        AfterCompact("s", "r", DRAFT), (HookBinding(point=BEFORE, hook="h", version="1"),)
    )
    assert seen == []  # bound at another point only
    await chain.after(AfterCompact("s", "r", DRAFT), (HookBinding(point=AFTER, hook="g"), BIND[1]))
    assert seen == ["g", "h"]


@pytest.mark.spec("R14", "R17")
async def test_a_binding_to_a_hook_not_loaded_or_of_another_version_fails_clearly() -> None:
    chain = HookChain((Hook(),))
    for missing in (
        HookBinding(point=AFTER, hook="nobody", version="1"),
        HookBinding(point=AFTER, hook="h", version="2"),
    ):
        with pytest.raises(HookFailed) as err:
            await chain.after(AfterCompact("s", "r", DRAFT), (missing,))
        assert err.value.details["reason"] == "hook_not_loaded"
        assert err.value.details["hook"] == missing.hook_id
