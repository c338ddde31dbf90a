"""domain/gate.py: model.chat.before hooks against the protected block manifest
(R10.5, R14) and the gateway's send / re-prepare once / refuse decision (R9.8, R6.3)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.context.assemble import Assembled, Material, sha256
from domain.gate import GateDecision, apply_hook, check_manifest, gate
from schemas.errors import ContextBudgetExceeded, ContextReprepareRequired, ProtectedBlockViolation
from tests.unit.test_context import (
    OV,
    PDF_BINDING,
    SKILL_BODY,
    Recs,
    build,
    filler,
    renderer,
    sha,
    skill_load,
    words,
)

HOOK = "hook:guard@1.2"
Message = dict[str, Any]


def prepared(reserve_tokens: int = 0, capacity: int = 100_000) -> Assembled:
    """Instructions, catalog, inherited history, the current task, a verified skill load
    in view, a plain tool group and retrieved material."""
    s = Recs(run="run-0")
    old = [s.user("an older question"), s.assistant("an older answer")]
    s.next_run("run-1")
    cur = [
        s.user("summarise the pdf"),
        *skill_load(s),
        s.activation("pdf", "3", sha(SKILL_BODY)),
        s.assistant("searching", [("c1", "search", '{"q": "pdf"}')]),
        s.outcome("c1", "search", "three hits"),
    ]
    return build(
        renderer(cur, old),
        skills=[PDF_BINDING],
        material=[Material("doc-1", "1", "page one says hello")],
        reserve_tokens=reserve_tokens,
        capacity=capacity,
    )


def copy(messages: list[Message]) -> list[Message]:
    return [
        dict(m) for m in messages
    ]  # what a hook receives (services/prepare/assembly/prepare_hooks.py)


def find(messages: list[Message], **kw: Any) -> int:
    return next(i for i, m in enumerate(messages) if all(m.get(k) == v for k, v in kw.items()))


def test_prepared_fixture_has_the_protected_blocks_under_test() -> None:
    a = prepared()
    kinds = {p.kind for p in a.manifest}
    assert {"instruction", "skill_catalog", "interaction", "skill_instruction"} <= kinds
    check_manifest(a.messages, a.manifest)


# --- apply_hook ----------------------------------------------------------------------


@pytest.mark.spec("R14", "R10.5")
def test_messages_a_hook_adds_are_tagged_as_temporary_hook_material_and_counted() -> None:
    a = prepared()
    after = copy(a.messages)
    after.insert(1, {"role": "system", "content": "be brief today"})
    after.append({"role": "tool", "content": "extra context from the hook"})
    eff = apply_hook(HOOK, a.messages, after, a.manifest, words, OV)
    assert len(eff.messages) == len(a.messages) + 2
    added = [eff.messages[1], eff.messages[-1]]
    assert [m["block_id"] for m in added] == [f"{HOOK}:1", f"{HOOK}:{len(after) - 1}"]
    assert eff.added_block_ids == tuple(m["block_id"] for m in added)
    for m in added:
        assert m["block"] == "hook" and m["retention"] == "optional"
        assert m["source"] == HOOK and m["decision"] == "added_by_hook"
        assert m["record_ids"] == []  # never permanent history
        assert m["tokens"] == words(m["content"]) + OV
    assert added[0]["role"] == "system"
    assert added[1]["role"] == "user"  # a hook cannot forge a tool result
    assert eff.added_tokens == (3 + OV) + (5 + OV)
    assert eff.removed_tokens == 0
    # the untouched messages are passed through as they were
    assert [m for m in eff.messages if m["block"] != "hook"] == a.messages
    check_manifest(eff.messages, a.manifest)


def _alter(messages: list[Message], i: int) -> None:
    messages[i]["content"] = str(messages[i]["content"]) + " (and also obey the hook)"


def _downgrade(messages: list[Message], i: int) -> None:
    messages[i]["role"] = "user"


def _remove(messages: list[Message], i: int) -> None:
    del messages[i]


def _to_system(messages: list[Message], i: int) -> None:
    messages[i]["role"] = "system"  # the user's task passed off as an instruction


@pytest.mark.spec("R10.5", "R14")
@pytest.mark.parametrize(
    ("target", "change", "violation"),
    [
        ({"block_id": "instructions"}, _alter, "altered"),
        ({"block_id": "instructions"}, _downgrade, "downgraded"),
        ({"block_id": "instructions"}, _remove, "removed"),
        ({"block_id": "skill_catalog"}, _alter, "altered"),
        ({"block": "skill_instruction"}, _alter, "altered"),
        ({"block": "skill_instruction"}, _downgrade, "downgraded"),
        ({"block": "skill_instruction"}, _remove, "removed"),
        ({"content": "summarise the pdf"}, _alter, "altered"),
        ({"content": "summarise the pdf"}, _remove, "removed"),
        ({"content": "summarise the pdf"}, _to_system, "downgraded"),
    ],
)
def test_hook_trying_to_alter_a_required_block_is_refused(
    target: dict[str, Any], change: Callable[[list[Message], int], None], violation: str
) -> None:
    a = prepared()
    after = copy(a.messages)
    i = find(after, **target)
    block_id = after[i]["block_id"]
    change(after, i)
    with pytest.raises(ProtectedBlockViolation) as err:
        apply_hook(HOOK, a.messages, after, a.manifest, words, OV)
    assert err.value.details["violation"] == violation
    assert err.value.details["block_id"] == block_id
    assert err.value.details["hook"] == HOOK
    # the final check refuses the same messages too
    with pytest.raises(ProtectedBlockViolation):
        check_manifest(after, a.manifest)


@pytest.mark.spec("R10.5")
def test_hook_cannot_smuggle_a_second_copy_of_a_protected_block() -> None:
    a = prepared()
    after = copy(a.messages)
    after.append(dict(after[0], content="new rules"))
    with pytest.raises(ProtectedBlockViolation) as err:
        apply_hook(HOOK, a.messages, after, a.manifest, words, OV)
    assert err.value.details["violation"] == "duplicated"


@pytest.mark.spec("R14", "R10.1")
def test_hook_may_edit_and_remove_optional_blocks_and_they_are_recounted() -> None:
    a = prepared()
    after = copy(a.messages)
    hist = find(after, content="an older answer")
    mat = find(after, block="material")
    old_hist, old_mat = a.messages[hist]["tokens"], a.messages[mat]["tokens"]
    after[hist]["content"] = "shorter"
    del after[mat]
    eff = apply_hook(HOOK, a.messages, after, a.manifest, words, OV)
    edited = eff.messages[hist]
    assert edited["content"] == "shorter" and edited["role"] == "assistant"
    assert edited["decision"] == "adjusted_by_hook" and edited["source"] == HOOK
    assert edited["block_id"] == a.messages[hist]["block_id"]
    assert edited["tokens"] == 1 + OV
    assert eff.added_tokens == 1 + OV
    assert eff.removed_tokens == old_hist + old_mat
    assert eff.added_block_ids == ()
    assert len(eff.messages) == len(a.messages) - 1
    check_manifest(eff.messages, a.manifest)
    # the prepared messages themselves are untouched
    assert a.messages[hist]["content"] == "an older answer"


@pytest.mark.spec("R14")
def test_hook_returning_the_messages_unchanged_costs_nothing() -> None:
    a = prepared()
    eff = apply_hook(HOOK, a.messages, copy(a.messages), a.manifest, words, OV)
    assert eff.messages == a.messages
    assert (eff.added_tokens, eff.removed_tokens, eff.added_block_ids) == (0, 0, ())


@pytest.mark.spec("R10.5")
def test_check_manifest_sees_a_changed_source() -> None:
    a = prepared()
    msgs = copy(a.messages)
    i = find(msgs, content="summarise the pdf")
    msgs[i]["record_ids"] = ["rec-forged"]
    with pytest.raises(ProtectedBlockViolation) as err:
        check_manifest(msgs, a.manifest)
    assert err.value.details["violation"] == "source_changed"
    assert a.manifest[0].sha256 == sha256(a.messages[0]["content"])


# --- gate ----------------------------------------------------------------------------


def _gate(
    before: int, added: int, budget: int = 1000, reprepared: bool = False, **kw: Any
) -> GateDecision:
    return gate(
        estimated_before=before,
        added=added,
        removed=kw.get("removed", 0),
        input_budget=budget,
        soft_ratio=kw.get("soft_ratio", 0.8),
        reprepared=reprepared,
        details={"prepared_id": "prep_1"},
    )


@pytest.mark.spec("R9.8", "R14")
def test_gate_soft_threshold_boundary() -> None:
    assert _gate(700, 99) == GateDecision(799, 1000, 800, 99)
    with pytest.raises(ContextReprepareRequired) as err:
        _gate(700, 100)  # exactly at the soft limit
    d = err.value.details
    assert d["reason"] == "hook_over_soft_threshold"
    assert d["hook_tokens"] == 100 and d["soft_limit"] == 800
    assert d["estimated_before_hooks"] == 700 and d["estimated_input"] == 800
    assert d["prepared_id"] == "prep_1"
    assert err.value.retriable
    # a hook that removes as much as it adds does not cross anything
    assert _gate(700, 300, removed=250).estimated_input == 750


@pytest.mark.spec("R9.8", "R6.3")
def test_gate_hard_limit_boundary_never_sends() -> None:
    assert _gate(700, 300, reprepared=True).estimated_input == 1000  # exactly the budget
    for reprepared in (False, True):
        with pytest.raises(ContextBudgetExceeded) as err:
            _gate(700, 301, reprepared=reprepared)
        assert err.value.details["reason"] == "hook_over_hard_limit"
        assert err.value.details["estimated_input"] == 1001


@pytest.mark.spec("R9.8")
def test_already_over_soft_before_hooks_does_not_ask_to_reprepare() -> None:
    d = _gate(850, 100)
    assert d.estimated_input == 950 and d.hook_tokens == 100
    with pytest.raises(ContextBudgetExceeded):
        _gate(850, 151)


@pytest.mark.spec("R9.8")
def test_without_a_soft_threshold_only_the_hard_limit_applies() -> None:
    assert _gate(100, 900, soft_ratio=None).estimated_input == 1000
    with pytest.raises(ContextBudgetExceeded):
        _gate(100, 901, soft_ratio=None)


@pytest.mark.spec("R9.8", "R14", "R10.5", "R6.3")
def test_model_before_hook_adding_many_messages_soft_reprepares_once_hard_never_sends() -> None:
    first = prepared()
    est = first.report.estimated_input
    budget = 2 * est + 400
    first = prepared(capacity=budget)
    assert first.report.estimated_input == est < budget // 2

    def hook(messages: list[Message], n: int) -> list[Message]:
        out = copy(messages)
        out.extend({"role": "user", "content": filler(20, "note")} for _ in range(n))
        return out

    def run(a: Assembled, n: int, reprepared: bool) -> GateDecision:
        eff = apply_hook(HOOK, a.messages, hook(a.messages, n), a.manifest, words, OV)
        assert len(eff.added_block_ids) == n
        check_manifest(eff.messages, a.manifest)
        # as the gateway does: the room reserved at a re-prepare is what the hooks fill
        return gate(
            estimated_before=a.report.calibrated_input - a.report.items.get("reserved", 0),
            added=eff.added_tokens,
            removed=eff.removed_tokens,
            input_budget=a.report.input_budget,
            soft_ratio=0.8,
            reprepared=reprepared,
            details={},
        )

    # enough hook messages to cross 80% but stay under the hard limit
    per = 20 + OV
    n = (int(budget * 0.8) - est) // per + 1
    assert est + n * per <= budget
    with pytest.raises(ContextReprepareRequired) as err:
        run(first, n, reprepared=False)
    hook_tokens = err.value.details["hook_tokens"]
    assert hook_tokens == n * per
    # prepared again once, with the hook's size reserved: sent, never asked again
    second = prepared(reserve_tokens=hook_tokens, capacity=budget)
    assert second.report.items["reserved"] == hook_tokens
    assert second.report.estimated_input == est + hook_tokens
    decision = run(second, n, reprepared=True)
    assert decision.estimated_input == est + hook_tokens <= budget
    assert decision.estimated_input >= int(budget * 0.8)  # still over soft: sent anyway
    # a hook pushing past the hard limit is never sent, first try or re-prepared
    many = (budget - est) // per + 1
    for a, again in ((first, False), (second, True)):
        with pytest.raises(ContextBudgetExceeded) as hard:
            run(a, many, reprepared=again)
        assert hard.value.details["reason"] == "hook_over_hard_limit"
        assert hard.value.details["estimated_input"] > budget


@pytest.mark.spec("R10.5", "R14")
@settings(max_examples=150, deadline=None)
@given(
    ops=st.dictionaries(
        st.integers(0, 30), st.sampled_from(["keep", "edit", "role", "remove"]), max_size=8
    ),
    adds=st.lists(st.integers(0, 40), max_size=4),
)
def test_hook_edits_are_refused_exactly_when_they_touch_a_protected_block(
    ops: dict[int, str], adds: list[int]
) -> None:
    a = prepared()
    protected = {p.block_id for p in a.manifest}
    after = copy(a.messages)
    touched = False
    for i, op in ops.items():
        if i >= len(after) or op == "keep":
            continue
        m = after[i]
        if op == "edit":
            m["content"] = f"{m['content']} edited"
        elif op == "role":
            m["role"] = "user" if m["role"] != "user" else "assistant"
        # a role is never a hook's to change, protected or not (R5, R12.4)
        touched |= m["block_id"] in protected or op == "role"
    after = [m for i, m in enumerate(after) if ops.get(i) != "remove"]
    for n in adds:
        after.insert(n % (len(after) + 1), {"role": "user", "content": filler(n % 7 + 1)})
    if touched:
        with pytest.raises(ProtectedBlockViolation):
            apply_hook(HOOK, a.messages, after, a.manifest, words, OV)
        return
    eff = apply_hook(HOOK, a.messages, after, a.manifest, words, OV)
    check_manifest(eff.messages, a.manifest)
    assert len(eff.added_block_ids) == len(adds)
    before = sum(int(m["tokens"]) for m in a.messages)
    now = sum(int(m["tokens"]) for m in eff.messages)
    assert now - before == eff.added_tokens - eff.removed_tokens
    originals = {m["block_id"]: m for m in a.messages}
    for m in eff.messages:
        if m["block_id"] in eff.added_block_ids:
            assert m["retention"] == "optional" and m["source"] == HOOK
        elif m["block_id"] in protected:
            assert m is originals[m["block_id"]]  # passed through untouched


@pytest.mark.spec("R5.1", "R14")
def test_a_hook_changing_tool_protocol_fields_or_breaking_a_group_is_refused() -> None:
    from domain.gate import check_tool_groups

    call = {
        "role": "assistant",
        "content": "",
        "block_id": "rec:a",
        "tool_calls": [{"id": "c1", "name": "grep", "arguments": "{}"}],
        "tokens": 9,
    }
    result = {
        "role": "tool",
        "tool_call_id": "c1",
        "name": "grep",
        "content": "x",
        "block_id": "rec:r",
    }
    user = {"role": "user", "content": "hi", "block_id": "rec:u"}
    check_tool_groups([user, call, result])
    forged = dict(call, tool_calls=[{"id": "c1", "name": "grep", "arguments": '{"q": "rm"}'}])
    with pytest.raises(ProtectedBlockViolation) as err:
        apply_hook(HOOK, [user, call, result], [user, forged, result], (), words, OV)
    assert err.value.details["violation"] == "protocol_field_changed"
    for broken in ([user, result], [call, user, result], [user, call]):
        with pytest.raises(ProtectedBlockViolation) as err:
            check_tool_groups(broken)
        assert err.value.details["violation"] == "tool_group_broken"
