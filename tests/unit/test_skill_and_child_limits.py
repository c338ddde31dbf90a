"""domain/window/active_skills.py and domain/window/child_transfer.py: the release's
active_skill_policy and child_transfer_policy limit which skills are active and what
crosses between a parent
and a child task (R12.2, R12.3, R13.2, R17)."""

from __future__ import annotations

from typing import Any

import pytest

from domain.context import render_state
from domain.context.assemble import Assembled, assemble
from domain.context.rendering import RecordView, ThreadRenderer
from domain.policy.context_policy import ContextPolicy, effective_policy
from domain.policy.sections import ActiveSkillPolicy, ChildTransferPolicy
from domain.window.active_skills import apply_policy, candidates
from domain.window.child_transfer import choose_background, result_view
from schemas.errors import ContextBudgetExceeded
from tests.unit.test_context import (
    INSTRUCTIONS,
    OV,
    TOOLS,
    Recs,
    filler,
    profile,
    renderer,
    sha,
    words,
)

SIZES = {"alpha": 20, "beta": 40, "gamma": 20}  # filler words of each skill body
BODIES = {n: f"Rules of the {n} skill: " + filler(k, n) for n, k in SIZES.items()}


def binding(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "version": "1",
        "description": f"{name} tools",
        "load_entry": "load_skill",
        "content_sha256": sha(BODIES[name]),
    }


def load_and_activate(s: Recs, name: str, call: str) -> list[RecordView]:
    ref = {"name": name, "revision": "1", "content_hash": sha(BODIES[name])}
    return [
        s.assistant(f"loading {name}", [(call, "load_skill", f'{{"n": "{name}"}}')]),
        s.outcome(call, "load_skill", BODIES[name], skill=ref),
        s.activation(name, "1", sha(BODIES[name])),
    ]


def policy(most: int = 8, cap: int | None = None, idle: int | None = None) -> ActiveSkillPolicy:
    return ActiveSkillPolicy(most, cap, idle)


def build(t: ThreadRenderer, skills: ActiveSkillPolicy | None) -> Assembled:
    return assemble(
        profile=profile(),
        counting_method="test:words",
        count=words,
        instructions=INSTRUCTIONS,
        skill_bindings=[binding(n) for n in BODIES],
        tools=TOOLS,
        thread=t,
        skills=skills,
    )


def active(a: Assembled) -> list[str]:
    return [str(m["skill"]) for m in a.messages if m.get("block") == "skill_instruction"]


def released(a: Assembled) -> dict[str, str]:
    return {str(d["skill"]): str(d["reason"]) for d in a.decisions if d["decision"] == "released"}


def three_skills() -> ThreadRenderer:
    s = Recs()
    recs = [s.user("work")]
    for i, name in enumerate(("beta", "gamma", "alpha")):  # alpha is the most recent load
        recs += load_and_activate(s, name, f"k{i}")
    return renderer(recs)


# --- max_active_skills -----------------------------------------------------------------


@pytest.mark.spec("R12.3", "R17")
def test_at_most_max_active_skills_stay_active_the_most_recently_used() -> None:
    t = three_skills()
    assert active(build(t, policy(most=8))) == ["beta@1", "gamma@1", "alpha@1"]  # in view
    a = build(t, policy(most=2))
    assert active(a) == ["gamma@1", "alpha@1"]  # in thread order; beta was loaded first
    assert released(a) == {"beta@1": "skill_over_max_active"}
    (d,) = [d for d in a.decisions if d["decision"] == "released"]
    assert d["limit"] == 2 and d["block_id"] == "skill:beta@1"
    # the released body stays an ordinary, compressible tool result
    (beta,) = [m for m in a.messages if m["role"] == "tool" and BODIES["beta"] == m["content"]]
    assert beta["category"] == "tool_results" and beta["retention"] == "compressible"
    assert beta["block_id"] not in {p.block_id for p in a.manifest}
    assert a.report.items["skills"] < build(t, policy(most=8)).report.items["skills"]


@pytest.mark.spec("R12.3", "R17")
def test_a_released_skill_is_not_reprovided_after_its_load_is_summarized() -> None:
    s = Recs()
    recs = [s.user("work")]
    for i, name in enumerate(("beta", "alpha")):
        recs += load_and_activate(s, name, f"k{i}")
    covered = frozenset(r.record_id for r in recs[1:])
    t = renderer([*recs, s.user("more", supplement=True)], covered=covered, summary="loaded")
    a = build(t, policy(most=1))
    assert active(a) == ["alpha@1"]
    assert not any(BODIES["beta"] in str(m["content"]) for m in a.messages)
    assert released(a) == {"beta@1": "skill_over_max_active"}


@pytest.mark.spec("R12.3", "R17")
def test_loading_a_released_skill_again_makes_it_the_most_recent_one() -> None:
    s = Recs()
    recs = [s.user("work")]
    for i, name in enumerate(("beta", "alpha", "beta")):
        recs += load_and_activate(s, name, f"k{i}")
    a = build(renderer(recs), policy(most=1))
    assert active(a) == ["beta@1"]
    assert released(a) == {"alpha@1": "skill_over_max_active"}


# --- max_instruction_tokens ------------------------------------------------------------


@pytest.mark.spec("R12.3", "R10.4", "R17")
def test_an_active_skill_over_max_instruction_tokens_is_a_budget_conflict_never_cut() -> None:
    t = three_skills()
    size = t.skill_loads[sha(BODIES["beta"])].tokens  # the largest body, as stored
    assert len(active(build(t, policy(cap=size)))) == 3
    with pytest.raises(ContextBudgetExceeded) as exc:
        build(t, policy(cap=size - 1))
    d = exc.value.details
    assert d["reason"] == "skill_instruction_over_cap"
    assert d["skill"] == "beta@1" and d["skill_tokens"] == size
    assert d["max_instruction_tokens"] == size - 1


@pytest.mark.spec("R12.3", "R17")
def test_a_released_skill_is_not_checked_against_max_instruction_tokens() -> None:
    t = three_skills()  # beta, the large one, was loaded first
    cap = t.skill_loads[sha(BODIES["alpha"])].tokens
    a = build(t, policy(most=2, cap=cap))
    assert active(a) == ["gamma@1", "alpha@1"]
    assert released(a) == {"beta@1": "skill_over_max_active"}


# --- idle_runs_before_release ----------------------------------------------------------


def runs_apart(idle_runs: int) -> ThreadRenderer:
    """beta used in run 0, alpha in the current run, ``idle_runs`` runs between."""
    s = Recs(run="run-0")
    inherited = [s.user("first"), *load_and_activate(s, "beta", "k0"), s.assistant("done")]
    for i in range(idle_runs):
        s.next_run(f"run-{i + 1}")
        inherited += [s.user(f"question {i}"), s.assistant("answer")]
    s.next_run("now")
    current = [s.user("now"), *load_and_activate(s, "alpha", "k1")]
    return renderer(current, inherited)


@pytest.mark.spec("R12.3", "R17")
@pytest.mark.parametrize("idle", [0, 1, 2, 3])
def test_a_skill_not_used_for_idle_runs_before_release_runs_is_released(idle: int) -> None:
    t = runs_apart(idle)
    a = build(t, policy(idle=2))
    if idle >= 2:
        assert active(a) == ["alpha@1"]
        assert released(a) == {"beta@1": "skill_idle_released"}
        (d,) = [d for d in a.decisions if d["decision"] == "released"]
        assert d["idle_runs"] == idle and d["limit"] == 2
    else:
        assert active(a) == ["beta@1", "alpha@1"]
    assert len(active(build(t, policy(idle=None)))) == 2  # None: kept until the thread ends


@pytest.mark.spec("R12.3", "R17")
def test_the_run_tracking_survives_a_stored_render_state() -> None:
    t = runs_apart(3)
    back = render_state.load(render_state.dump(t), words, t.covered)
    assert back is not None
    assert back.runs == t.runs and back.skill_used == t.skill_used
    assert released(build(back, policy(idle=2))) == released(build(t, policy(idle=2)))


def test_no_policy_keeps_every_verified_skill() -> None:
    t = three_skills()
    kept, notes = apply_policy(t, candidates(t, [binding(n) for n in BODIES]), None)
    assert [c.name for c in kept] == ["alpha", "beta", "gamma"] and notes == []


# --- child background (max_background_refs, max_background_tokens) ----------------------


def background(n: int, size: int = 10) -> list[RecordView]:
    s = Recs()
    return [s.user(filler(size, f"b{i}")) for i in range(n)]


def transfer(refs: int = 20, tokens: int | None = None, result: int | None = None) -> Any:
    return ChildTransferPolicy(refs, tokens, result)


@pytest.mark.spec("R13.2", "R17")
def test_a_childs_background_keeps_the_first_max_background_refs_records() -> None:
    recs = background(5)
    kept, left = choose_background(list(reversed(recs)), transfer(refs=3))
    assert [r.record_id for r in kept] == [r.record_id for r in recs[:3]]  # session order
    assert [(d["block_id"], d["reason"], d["limit"]) for d in left] == [
        (f"background:{r.record_id}", "background_over_max_refs", 3) for r in recs[3:]
    ]
    assert all(d["decision"] == "dropped" for d in left)
    assert choose_background(recs, transfer(refs=5)) == (recs, [])


@pytest.mark.spec("R13.2", "R17")
def test_a_childs_background_stops_at_the_first_record_over_max_background_tokens() -> None:
    s = Recs()
    recs = [s.user(filler(10)), s.user(filler(30)), s.user(filler(5))]
    kept, left = choose_background(recs, transfer(tokens=25))
    assert kept == recs[:1]  # the small third one does not jump the queue
    assert [d["reason"] for d in left] == ["background_over_max_tokens"] * 2
    assert choose_background(recs, transfer(tokens=45))[0] == recs
    assert choose_background(recs, transfer(tokens=None))[0] == recs


@pytest.mark.spec("R13.2", "R17")
def test_background_left_out_is_a_decision_of_the_childs_prepare() -> None:
    recs = background(4)
    t = ThreadRenderer(words, OV, transfer=transfer(refs=2))
    t.add_background(recs)
    a = build(t, None)
    shown = [m for m in a.messages if m.get("block") == "material"]
    assert [m["record_ids"] for m in shown] == [[r.record_id] for r in recs[:2]]
    left = [d for d in a.decisions if str(d["block_id"]).startswith("background:")]
    assert [d["record_ids"] for d in left] == [[r.record_id] for r in recs[2:]]
    back = render_state.load(render_state.dump(t), words, t.covered)
    assert back is not None and back.transfer_notes == t.transfer_notes
    assert back.transfer == t.transfer


# --- child result (max_result_tokens) ----------------------------------------------------


def _parent(s: Recs, size: int, cap: int | None) -> ThreadRenderer:
    t = ThreadRenderer(words, OV, transfer=transfer(result=cap))
    for rec in (s.user("delegate"), s.child(filler(size, "found"))):
        t.feed(rec, inherited=False)
    return t


@pytest.mark.spec("R13.2", "R10.3", "R17")
def test_a_child_result_over_max_result_tokens_is_a_view_within_the_cap() -> None:
    whole = _parent(Recs(), 300, None)
    (m,) = [m for m in whole.messages if m.get("reason") == "child_result"]
    assert m["content"].endswith(filler(300, "found")) and whole.externalized == []
    t = _parent(Recs(), 300, 50)
    (v,) = [m for m in t.messages if m.get("block") == "material"]
    assert v["decision"] == "externalized"
    assert v["reason"] == "child_result_over_max_result_tokens"
    rid = v["record_ids"][0]
    assert v["content_ref"] == f"rec:{rid}" and t.externalized == [rid]
    shown = v["content"].split("\n", 1)[1]
    assert 0 < words(shown) <= 50 and filler(300, "found").startswith(shown)
    assert f'read_content(ref="rec:{rid}"' in v["content"]
    assert t.tokens["material"] < whole.tokens["material"]
    assert _parent(Recs(), 300, 300).externalized == []  # at the cap: shown whole


def test_the_result_view_prefix_shrinks_until_it_fits_the_cap() -> None:
    rec = Recs().child(filler(400))
    for cap in (1, 7, 100):
        shown = result_view(rec, cap, 100_000, words).split("\n", 1)[1]
        assert words(shown) <= cap and rec.text.startswith(shown)


# --- probes for tests/unit/test_policy_field_effects.py (DIRECT rows) --------------------


def active_skills_probe(p: ContextPolicy) -> tuple[Any, ...]:
    """What a prepare makes of two verified skills two runs apart (beta used two runs
    ago, alpha now) under ``p.active_skill_policy``: the active ones and the released
    ones, or the refusal of an oversized one."""
    try:
        a = build(runs_apart(2), p.active_skill_policy)
    except ContextBudgetExceeded as exc:
        return ("refused", exc.details["reason"])
    return tuple(active(a)), tuple(sorted(released(a).items()))


def child_transfer_probe(p: ContextPolicy) -> tuple[Any, ...]:
    """A child's background (three records of 10, 30 and 5 tokens) and a 300-token child
    result in the parent, under ``p.child_transfer_policy``."""
    s = Recs()
    recs = [s.user(filler(10)), s.user(filler(30)), s.user(filler(5))]
    kept, left = choose_background(recs, p.child_transfer_policy)
    t = ThreadRenderer(words, OV, transfer=p.child_transfer_policy)
    t.feed(s.child(filler(300, "found")), inherited=False)
    return (
        tuple(r.record_id for r in kept),
        tuple(d["reason"] for d in left),
        tuple(t.externalized),
    )


@pytest.mark.parametrize(
    ("probe", "changed"),
    [
        (active_skills_probe, {"active_skill_policy": {"max_active_skills": 1}}),
        (active_skills_probe, {"active_skill_policy": {"max_instruction_tokens": 10}}),
        (active_skills_probe, {"active_skill_policy": {"idle_runs_before_release": 1}}),
        (child_transfer_probe, {"child_transfer_policy": {"max_background_refs": 1}}),
        (child_transfer_probe, {"child_transfer_policy": {"max_background_tokens": 25}}),
        (child_transfer_probe, {"child_transfer_policy": {"max_result_tokens": 50}}),
    ],
)
def test_each_probe_tells_the_default_policy_from_the_changed_one(
    probe: Any, changed: dict[str, Any]
) -> None:
    assert probe(effective_policy(changed)[0]) != probe(effective_policy({})[0])
