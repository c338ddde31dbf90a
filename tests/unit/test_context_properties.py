"""Property tests for ``assemble`` over random event streams and budgets: tool groups are
never orphaned (R5.1), the estimate covers what is sent and sending only happens within
budget (R6), required content is present and protected (R10.1, R10.5), and the output is
deterministic and independent of how the records were fed (R4.3, R2.3)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from domain.authority import INSTRUCTION_BLOCKS
from domain.context.assemble import Assembled, Material
from domain.context.providers import FORMATS
from domain.context.providers import render as render_provider
from domain.context.rendering import RecordView, ThreadRenderer, tool_schema_text
from domain.gate import check_manifest
from domain.policy.context_policy import LargeResultSettings
from domain.window.budget import Calibration, enforce
from schemas.errors import ContextBudgetExceeded
from storage.tokenizers import make_counter
from tests.unit.test_context import (
    OV,
    PDF_BINDING,
    PDF_REF,
    SKILL_BODY,
    TOOLS,
    CountFn,
    Recs,
    build,
    sha,
)


def wc(text: str) -> int:
    return len(text.split()) + 1


VOCAB = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "report",
    "table",
    "file",
    "page",
    "total",
    "date",
    "value",
    "check",
    "result",
    "error",
    "done",
    "next",
    "open",
    "close",
    "read",
    "write",
    "list",
    "item",
    "user",
    "tool",
    "plan",
    "step",
    "note",
    "42",
    "7",
    "x",
    "y",
]


def make_text(seed: int, n: int) -> str:
    return " ".join(VOCAB[(seed * 31 + i * 7 + i // 5) % len(VOCAB)] for i in range(n))


@dataclass
class Scenario:
    runs: list[list[RecordView]]  # the last run is the current thread
    instructions: str
    tools: list[dict[str, Any]]
    skills: list[dict[str, Any]]
    material: list[Material]
    capacity: int
    large: LargeResultSettings
    covered: frozenset[str]
    summary: str | None
    split: int  # current-run records fed before a first assemble
    calibration: Calibration | None
    current_users: list[str] = field(default_factory=list)

    @property
    def inherited(self) -> list[RecordView]:
        return [r for run in self.runs[:-1] for r in run]

    @property
    def current(self) -> list[RecordView]:
        return self.runs[-1]


_ACTIONS = (
    "user",
    "supplement",
    "assistant",
    "calls",
    "calls",
    "outcome",
    "outcome",
    "outcome",
    "child",
    "stray",
    "skill",
)
_STATUSES = ("ok", "error", "cancelled", "unknown")


@st.composite
def scenarios(draw: st.DrawFn, count: CountFn = wc) -> Scenario:
    s = Recs(count, run="run-0")
    n_runs = draw(st.integers(1, 3))
    step = st.tuples(st.sampled_from(_ACTIONS), st.integers(0, 1000), st.integers(0, 1000))
    runs: list[list[RecordView]] = []
    n_calls = 0
    users: list[str] = []
    for r in range(n_runs):
        s.next_run(f"run-{r}")
        last = r == n_runs - 1
        recs: list[RecordView] = [s.user(make_text(r, 1 + r % 5))]  # a run starts with a question
        outstanding: list[tuple[str, str]] = []
        for action, a, b in draw(st.lists(step, max_size=14)):
            if action == "user":
                recs.append(s.user(make_text(a, 1 + b % 12)))
            elif action == "supplement":
                recs.append(s.user(make_text(a, 1 + b % 6), supplement=True))
            elif action == "assistant":
                recs.append(s.assistant(make_text(a, 1 + b % 15)))
                outstanding = []  # closes the open group: unanswered calls stay unknown
            elif action == "calls":
                calls = []
                for k in range(1 + a % 3):
                    cid, name = f"c{n_calls}", ("search", "fetch", "read_file")[(a + k) % 3]
                    n_calls += 1
                    calls.append((cid, name, f'{{"q": "{make_text(a + k, 1 + k)}", "n": {k}}}'))
                recs.append(s.assistant(make_text(b, b % 6), calls))
                outstanding = [(c, n) for c, n, _ in calls]
            elif action == "outcome" and outstanding:
                cid, name = outstanding.pop(a % len(outstanding))
                size = 120 + b % 400 if b % 4 == 0 else 1 + b % 25  # some very large results
                recs.append(s.outcome(cid, name, make_text(b, size), _STATUSES[a % 4]))
            elif action == "child":
                recs.append(s.child(make_text(a, 1 + b % 10)))
            elif action == "stray":
                recs.append(s.outcome(f"stray{a}", "fetch", make_text(b, 1 + b % 5)))
            elif action == "skill":
                recs.append(s.assistant("load", [(f"c{n_calls}", "load_skill", '{"n": "pdf"}')]))
                recs.append(s.outcome(f"c{n_calls}", "load_skill", SKILL_BODY, skill=PDF_REF))
                recs.append(s.activation("pdf", "3", sha(SKILL_BODY)))
                n_calls += 1
                outstanding = []
        if last and outstanding:
            # This thread's calls are all answered (a prepare refuses pending calls),
            # in any order, possibly with supplements in between.
            for i, (cid, name) in enumerate(draw(st.permutations(outstanding))):
                recs.append(s.outcome(cid, name, make_text(i, 3 + i), "ok"))
                if draw(st.booleans()):
                    recs.append(s.user(make_text(i, 2), supplement=True))
        runs.append(recs)
        if last:
            users = [x.record_id for x in recs if x.kind in ("user_input", "supplement")]
    summary = None
    covered: frozenset[str] = frozenset()
    if n_runs > 1 and draw(st.booleans()):  # the first run was summarized
        covered = frozenset(x.record_id for x in runs[0])
        summary = make_text(7, 1 + draw(st.integers(0, 30)))
    all_ids = [x.record_id for run in runs for x in run]
    material = [
        Material(
            f"d{c}",
            str(v),
            make_text(c + 3 * v, n),
            record_id=all_ids[rid % len(all_ids)] if rid % 3 == 0 else None,
        )
        for c, v, n, rid in draw(
            st.lists(
                st.tuples(
                    st.integers(0, 2), st.integers(1, 2), st.integers(1, 80), st.integers(0, 99)
                ),
                max_size=4,
            )
        )
    ]
    return Scenario(
        runs=runs,
        instructions=make_text(draw(st.integers(0, 99)), draw(st.integers(1, 60))),
        tools=TOOLS[: draw(st.integers(0, 2))],
        skills=[PDF_BINDING] if draw(st.booleans()) else [],
        material=material,
        capacity=draw(st.integers(40, 4000)),
        large=LargeResultSettings(draw(st.integers(20, 200)), draw(st.integers(10, 300))),
        covered=covered,
        summary=summary,
        split=draw(st.integers(0, len(runs[-1]))),
        calibration=draw(
            st.none() | st.floats(0.8, 1.5).map(lambda f: Calibration(factor=f, samples=2))
        ),
        current_users=users,
    )


def render(sc: Scenario, count: CountFn, split: int | None = None) -> ThreadRenderer:
    r = ThreadRenderer(count, OV, sc.covered, "sum-1" if sc.summary else None, sc.large)
    if sc.summary:
        r.add_summary(sc.summary, count(sc.summary))
    for rec in sc.inherited:
        r.feed(rec, inherited=True)
    r.seal_inherited()
    cur = sc.current
    if split is not None:
        for rec in cur[:split]:
            r.feed(rec, inherited=False)
        assemble(sc, r, count)  # a prepare in between
        cur = cur[split:]
    for rec in cur:
        r.feed(rec, inherited=False)
    return r


def assemble(sc: Scenario, r: ThreadRenderer, count: CountFn) -> Assembled:
    return build(
        r,
        instructions=sc.instructions,
        skills=sc.skills,
        tools=sc.tools,
        material=sc.material,
        capacity=sc.capacity,
        count=count,
        calibration=sc.calibration,
    )


def real_tokens(m: dict[str, Any], count: CountFn) -> int:
    """What the model sees of one message, counted the way records are counted."""
    parts = [str(m.get("content") or "")]
    for c in m.get("tool_calls") or ():
        parts += [c["name"], c["arguments"]]
    return count("\n".join(parts))


# --- properties ------------------------------------------------------------------------


def check_groups(msgs: list[dict[str, Any]]) -> None:
    """(a) No orphans: a tool message answers a call of the nearest preceding assistant,
    and every call has its result before the next non-tool message."""
    seen_results: set[str] = set()
    for i, m in enumerate(msgs):
        if m["role"] == "tool":
            j = i - 1
            while j >= 0 and msgs[j]["role"] == "tool":
                j -= 1
            assert j >= 0 and msgs[j]["role"] == "assistant", (i, m)
            assert m["tool_call_id"] in [c["id"] for c in msgs[j].get("tool_calls") or ()]
            assert m["tool_call_id"] not in seen_results
            seen_results.add(m["tool_call_id"])
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            k = i + 1
            answered = []
            while k < len(msgs) and msgs[k]["role"] == "tool":
                answered.append(msgs[k]["tool_call_id"])
                k += 1
            assert answered == ids, (ids, answered)


def check_budget(a: Assembled, sc: Scenario, count: CountFn) -> None:
    """(b) Sent only within budget; the estimate covers everything sent."""
    r = a.report
    assert r.required <= r.estimated_input == sum(r.items.values())
    try:
        enforce(r)
    except ContextBudgetExceeded as exc:
        reason = exc.details["reason"]
        assert reason == (
            "required_over_budget" if r.required > r.input_budget else "history_over_budget"
        )
        assert r.calibrated_input > r.input_budget
    else:
        assert r.estimated_input <= r.calibrated_input <= r.input_budget
    if any(
        m["block"] == "material" and m["category"] == "material" and not m["record_ids"]
        for m in a.messages
    ):
        # optional material is only kept within budget, by the estimate enforce checks
        assert r.calibrated_input <= r.input_budget
    tool_text = tool_schema_text(sc.tools) if sc.tools else ""
    real = sum(real_tokens(m, count) for m in a.messages) + (count(tool_text) if tool_text else 0)
    for m in a.messages:
        assert m["tokens"] >= real_tokens(m, count) + OV, m
    assert r.estimated_input >= real + OV * len(a.messages)


def check_required(a: Assembled, sc: Scenario) -> None:
    """(c) Instructions and this run's user input are present; the manifest holds."""
    head = a.messages[0]
    assert head["block_id"] == "instructions" and head["content"] == sc.instructions
    assert head["role"] == "system" and head["retention"] == "required"
    shown = {rid for m in a.messages for rid in m["record_ids"]}
    for rid in sc.current_users:
        assert rid in shown, rid
    check_manifest(a.messages, a.manifest)
    ids = [str(m["block_id"]) for m in a.messages]
    assert len(set(ids)) == len(ids)  # hooks and the final check match blocks by id
    assert {f"rec:{rid}" for rid in sc.current_users} <= {p.block_id for p in a.manifest}


@pytest.mark.spec("R5.1", "R5.3", "R5.4", "R6.2", "R6.3", "R10.1", "R10.5", "R4.3", "R2.3")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenarios())
def test_assembled_context_invariants(sc: Scenario) -> None:
    r = render(sc, wc)
    assume(not r.pending_calls())
    a = assemble(sc, r, wc)
    check_groups(a.messages)
    check_budget(a, sc, wc)
    check_required(a, sc)
    for m in a.messages:  # material is never promoted to an instruction (R12.4)
        if m["block"] == "material":
            assert m["role"] == "user" and m["retention"] == "optional"
    # (d) deterministic, and independent of how the records were fed
    again = assemble(sc, render(sc, wc), wc)
    assert again.messages == a.messages
    assert again.report == a.report
    assert again.manifest == a.manifest and again.decisions == a.decisions
    chunked = assemble(sc, render(sc, wc, split=sc.split), wc)
    assert chunked.messages == a.messages
    assert chunked.report == a.report and chunked.manifest == a.manifest


_TIKTOKEN = make_counter("cl100k_base").count


@pytest.mark.spec("R6.2", "R6.4", "R5.1")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenarios(count=_TIKTOKEN))
def test_estimate_covers_the_real_tokenizer_count(sc: Scenario) -> None:
    r = render(sc, _TIKTOKEN)
    assume(not r.pending_calls())
    a = assemble(sc, r, _TIKTOKEN)
    check_groups(a.messages)
    check_budget(a, sc, _TIKTOKEN)
    check_required(a, sc)


def _system_texts(body: dict[str, Any], fmt: str) -> list[str]:
    """Every text a provider request gives system/developer authority."""
    if fmt == "openai_chat":
        return [str(m["content"]) for m in body["messages"] if m["role"] in ("system", "developer")]
    if fmt == "openai_responses":
        return [body["instructions"]] + [
            c["text"]
            for m in body["input"]
            if m.get("type") == "message" and m["role"] in ("system", "developer")
            for c in m["content"]
        ]
    return [b["text"] for b in body.get("system", [])]


@pytest.mark.spec("R3.3", "R12.4", "R11.5")
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenarios())
def test_every_system_or_developer_message_comes_from_a_release_owned_block(
    sc: Scenario,
) -> None:
    """Authority by origin: summaries, state notes quoting tool output, "result unknown"
    notes, child results and material never speak as system/developer, in any format."""
    r = render(sc, wc)
    assume(not r.pending_calls())
    a = assemble(sc, r, wc)
    allowed = [m for m in a.messages if m["block"] in INSTRUCTION_BLOCKS]
    for m in a.messages:
        if m["role"] in ("system", "developer"):
            assert m["block"] in INSTRUCTION_BLOCKS, m
    allowed_texts = {str(m["content"]) for m in allowed}
    tools = [dict(t) for t in sc.tools]
    for fmt in FORMATS:
        body = render_provider(a.messages, tools, fmt)
        for text in _system_texts(body, fmt):
            # one release-owned block, or several joined (Anthropic ``system``)
            assert all(part in allowed_texts for part in text.split("\n\n") if part) or (
                text in allowed_texts
            ), (fmt, text)
