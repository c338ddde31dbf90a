"""The release's active_skill_policy and child_transfer_policy take effect through the
real stack (issue 28 item 3; R12.3, R13.2, R17): the same conversation under two releases
that differ in one limit gives two different prepared contexts."""

from __future__ import annotations

import hashlib
from typing import Any

import asyncpg
import pytest

from schemas.contracts import ChildResultPayload, SkillRef
from services.sdk.client import ApiError, ContextClient, RunHandle
from tests.support.flows import client, new_session
from tests.support.services import Services

pytestmark = pytest.mark.integration

BODIES = {
    "lint": "# lint skill\nRun the linter before every commit.",
    "docs": "# docs skill\nEvery public function gets a docstring. " + "Be precise. " * 30,
}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _bindings() -> list[dict[str, Any]]:
    return [
        {
            "name": n,
            "version": "1",
            "description": f"{n} rules",
            "load_entry": "load_skill",
            "content_sha256": _sha(body),
        }
        for n, body in BODIES.items()
    ]


async def _load(c: ContextClient, run: RunHandle, name: str) -> None:
    tag = f"{name}-{run.run_id[-6:]}"
    await c.append_model_result(
        run, f"Loading {name}.", f"m-{tag}", [(f"c-{tag}", "load_skill", f'{{"n": "{name}"}}')]
    )
    await c.append_tool_outcome(
        run,
        f"c-{tag}",
        "load_skill",
        BODIES[name],
        tool_kind="skill_load",
        skill=SkillRef(name, "1", _sha(BODIES[name])),
    )
    await c.activate_resource(run, "skill", name, "1", BODIES[name])


async def _skills_session(c: ContextClient, skills: dict[str, Any]) -> dict[str, Any]:
    return await new_session(
        c, context_policy={"active_skill_policy": skills}, skill_bindings=_bindings()
    )


def _active(prepared: dict[str, Any]) -> list[str]:
    return [m["skill"] for m in prepared["messages"] if m.get("block") == "skill_instruction"]


def _released(prepared: dict[str, Any]) -> dict[str, str]:
    return {d["skill"]: d["reason"] for d in prepared["decisions"] if d["decision"] == "released"}


async def _two_skills(c: ContextClient, skills: dict[str, Any]) -> dict[str, Any]:
    run = await c.start_run(await _skills_session(c, skills))
    await c.append_user(run, "Tidy the repository.", f"q-{run.run_id}")
    await _load(c, run, "docs")
    await _load(c, run, "lint")  # the most recent load
    return await c.prepare(run)


@pytest.mark.spec("R12.3", "R10.4", "R17")
async def test_max_active_skills_and_max_instruction_tokens_change_the_prepare(
    services: Services,
) -> None:
    async with client(services) as c:
        both = await _two_skills(c, {})
        one = await _two_skills(c, {"max_active_skills": 1})
        with pytest.raises(ApiError) as refused:
            await _two_skills(c, {"max_instruction_tokens": 20})
    assert _active(both) == ["docs@1", "lint@1"] and _released(both) == {}
    assert _active(one) == ["lint@1"]
    assert _released(one) == {"docs@1": "skill_over_max_active"}
    assert one["budget"]["items"]["skills"] < both["budget"]["items"]["skills"]
    assert refused.value.code == "context_budget_exceeded"
    assert refused.value.details["reason"] == "skill_instruction_over_cap"
    assert refused.value.details["skill"] == "docs@1"
    assert refused.value.details["max_instruction_tokens"] == 20


async def _idle_thread(c: ContextClient, skills: dict[str, Any]) -> dict[str, Any]:
    """lint loaded in the first run, two runs without it, then a prepare in the fourth."""
    session = await _skills_session(c, skills)
    run = await c.start_run(session)
    await c.append_user(run, "First question.", f"q0-{run.run_id}")
    await _load(c, run, "lint")
    await c.append_model_result(run, "Done.", f"a0-{run.run_id}")
    await c.finish_run(run)
    for i in (1, 2):
        run = await c.start_run(session)
        await c.append_user(run, f"Question {i}.", f"q{i}-{run.run_id}")
        await c.append_model_result(run, "Answered.", f"a{i}-{run.run_id}")
        await c.finish_run(run)
    run = await c.start_run(session)
    await c.append_user(run, "Last question.", f"q3-{run.run_id}")
    return await c.prepare(run)


@pytest.mark.spec("R12.3", "R17")
async def test_idle_runs_before_release_releases_a_skill_unused_for_that_many_runs(
    services: Services,
) -> None:
    async with client(services) as c:
        kept = await _idle_thread(c, {"idle_runs_before_release": 3})
        gone = await _idle_thread(c, {"idle_runs_before_release": 2})
    assert _active(kept) == ["lint@1"]
    assert _active(gone) == [] and _released(gone) == {"lint@1": "skill_idle_released"}
    (d,) = [d for d in gone["decisions"] if d["decision"] == "released"]
    assert d["idle_runs"] == 2


async def _record_id(db: asyncpg.Pool, sid: str, event_key: str) -> str:
    rid = await db.fetchval(
        "SELECT record_id FROM records WHERE session_id=$1 AND event_key=$2", sid, event_key
    )
    assert rid is not None
    return str(rid)


async def _child_view(
    c: ContextClient, db: asyncpg.Pool, transfer: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    session = await new_session(c, context_policy={"child_transfer_policy": transfer})
    sid = session["session_id"]
    run = await c.start_run(session)
    for i, text in enumerate(("Short note.", "A longer note. " * 40, "Last note.")):
        await c.append_user(run, text, f"bg{i}-{sid}", supplement=i > 0)
    await c.prepare(run)
    chosen = [await _record_id(db, sid, f"bg{i}-{sid}") for i in range(3)]
    child = await c.export_for_child(run, "child-1", chosen)
    await c.append_user(child, "Child task: summarize the notes.", f"child-q-{sid}")
    return await c.prepare(child), chosen


def _background(prepared: dict[str, Any]) -> list[str]:
    return [
        i
        for m in prepared["messages"]
        if m.get("block") == "material" and "background from the parent" in m["content"]
        for i in m["record_ids"]
    ]


def _left_out(prepared: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (d["record_ids"][0], d["reason"])
        for d in prepared["decisions"]
        if str(d["block_id"]).startswith("background:")
    ]


@pytest.mark.spec("R13.2", "R17")
async def test_max_background_refs_and_tokens_limit_what_a_child_inherits(
    services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        every, ids = await _child_view(c, db, {})
        two, ids2 = await _child_view(c, db, {"max_background_refs": 2})
        small, ids3 = await _child_view(c, db, {"max_background_tokens": 50})
    assert _background(every) == ids and _left_out(every) == []
    assert _background(two) == ids2[:2]
    assert _left_out(two) == [(ids2[2], "background_over_max_refs")]
    assert _background(small) == ids3[:1]  # the long second note does not fit
    assert _left_out(small) == [(i, "background_over_max_tokens") for i in ids3[1:]]


async def _parent_view(c: ContextClient, cap: int | None) -> tuple[dict[str, Any], RunHandle]:
    policy = {"child_transfer_policy": {"max_result_tokens": cap}}
    run = await c.start_run(await new_session(c, context_policy=policy))
    await c.append_user(run, "Delegate the audit.", f"q-{run.run_id}")
    child = await c.export_for_child(run, "auditor", [])
    await c.append_model_result(child, "audited", f"child-m-{run.run_id}")
    text = "Finding: " + " ".join(f"file{i}.py is clean." for i in range(200))
    result = ChildResultPayload("auditor", f"op-{run.run_id}", "ok", "audited", 1)
    await c.accept_child_result(run, result, text)
    return await c.prepare(run), run


@pytest.mark.spec("R13.2", "R10.3", "R17")
async def test_max_result_tokens_caps_a_child_result_in_the_parent_as_a_view(
    services: Services,
) -> None:
    async with client(services) as c:
        whole, _ = await _parent_view(c, None)
        capped, run = await _parent_view(c, 40)
        (m,) = [m for m in capped["messages"] if m.get("content_ref")]
        back = await c.read_content(run, m["content_ref"], 0, 100_000)
    (w,) = [m for m in whole["messages"] if m.get("reason") == "child_result"]
    assert w["content"].endswith("file199.py is clean.")
    assert m["decision"] == "externalized"
    assert m["reason"] == "child_result_over_max_result_tokens"
    assert "file199.py" not in m["content"] and m["tokens"] < w["tokens"]
    assert capped["read_content_tool"] is not None
    assert back["content"].endswith("file199.py is clean.")
