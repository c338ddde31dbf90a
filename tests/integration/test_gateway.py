"""The model gateway's final check, prepare hooks and the model call record, through the
real stack (R6.4, R9.8, R10.3, R10.5, R12.4, R14, R15.1, R19)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from services.sdk.client import ApiError, ContextClient, RunHandle
from tests.support.flows import client, new_session
from tests.support.services import Services, start_services
from tests.support.stack import Stack

pytestmark = pytest.mark.integration

# InputBudget 3,400; the soft threshold (context_ratio 0.8) is 2,720 tokens.
SMALL = {
    "name": "gw-model",
    "context_capacity": 4000,
    "output_reserve": 500,
    "safety_margin": 100,
}


@pytest.fixture(scope="module")
def gw(stack: Stack, pg_dsn: str) -> Iterator[Services]:
    svc = start_services(stack, pg_dsn, ALC_PREPARE_HOOKS="tests.support.prepare_hooks:make")
    yield svc
    svc.stop()


# The loaded hook runs for the releases that bind it (issue 28): these all do.
MARKER = {
    "hook_bindings": [
        {"point": p, "hook": "marker", "version": "3"}
        for p in ("context.prepare.before", "model.chat.before", "model.chat.after")
    ]
}


async def _ask(c: ContextClient, question: str, **release: Any) -> RunHandle:
    session = await new_session(c, **({"model_profile": SMALL, "context_policy": MARKER} | release))
    run = await c.start_run(session)
    await c.append_user(run, question, f"q-{uuid.uuid4().hex[:6]}")
    return run


async def _calls(db: asyncpg.Pool, session_id: str) -> list[asyncpg.Record]:
    return list(
        await db.fetch(
            "SELECT * FROM model_calls WHERE session_id=$1 ORDER BY created_at", session_id
        )
    )


@pytest.mark.spec("R9.8", "R14", "R19")
async def test_model_before_hook_adding_many_messages_soft_reprepares_once(
    gw: Services, db: asyncpg.Pool
) -> None:
    async with client(gw) as c:
        # its own model name: the usage it reports calibrates that model only
        run = await _ask(
            c,
            "Summarize the incident. [hook-add 2800]",
            model_profile=SMALL | {"name": f"soft-{uuid.uuid4().hex[:6]}"},
        )
        sent: list[dict[str, Any]] = []

        async def send(request: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
            sent.append(request)
            return {"content": "done"}, {"input_tokens": 3000, "output_tokens": 5}

        first = await c.prepare(run)
        with pytest.raises(ApiError) as soft:
            await c.check_model_call(run, first)
        assert soft.value.code == "context_reprepare_required"
        assert soft.value.details["estimated_input"] < soft.value.details["input_budget"]
        assert soft.value.details["estimated_input"] >= soft.value.details["soft_limit"]
        hook_tokens = soft.value.details["hook_tokens"]
        assert hook_tokens >= 2700

        # The SDK loop: prepare → check → re-prepare once → check → send → report.
        response, record = await c.call_model(run, send)
        assert response == {"content": "done"} and len(sent) == 1
        again = record["prepared"]
        assert again["reprepare_of"] is not None
        assert again["budget"]["items"]["reserved"] == hook_tokens
        # The re-prepared context is never asked to re-prepare again: it was sent.
        added = [m for m in sent[0]["messages"] if m["content"].startswith("note ")]
        assert len(added) == 10
    rows = await _calls(db, run.session_id)
    assert [r["status"] for r in rows] == ["completed"]
    assert rows[0]["prepared_id"] == again["prepared_id"]
    assert rows[0]["hook_versions"] == ["marker@3"]


@pytest.mark.spec("R9.7", "R9.8", "R14", "R19")
async def test_model_before_hook_crossing_the_hard_limit_is_never_sent(
    gw: Services, db: asyncpg.Pool
) -> None:
    async with client(gw) as c:
        run = await _ask(c, "Summarize the incident. [hook-add 4000]")
        prepared = await c.prepare(run)
        with pytest.raises(ApiError) as hard:
            await c.check_model_call(run, prepared)
        assert hard.value.code == "context_budget_exceeded"
        assert hard.value.details["reason"] == "hook_over_hard_limit"
        assert hard.value.details["estimated_input"] > hard.value.details["input_budget"]
        # A re-prepared context over the hard limit is refused too.
        again = await c.prepare(run, reprepare_of=prepared["prepared_id"])
        with pytest.raises(ApiError) as hard2:
            await c.check_model_call(run, again)
        assert hard2.value.code == "context_budget_exceeded"
    assert await _calls(db, run.session_id) == []  # nothing sent, nothing recorded


@pytest.mark.spec("R10.5", "R14", "R19")
@pytest.mark.parametrize(
    ("marker", "violation"), [("[hook-tamper]", "altered"), ("[hook-downgrade]", "downgraded")]
)
async def test_a_hook_trying_to_alter_a_required_block_is_refused(
    gw: Services, db: asyncpg.Pool, marker: str, violation: str
) -> None:
    async with client(gw) as c:
        run = await _ask(c, f"Review the patch. {marker}")
        prepared = await c.prepare(run)
        manifest = {p["block_id"]: p for p in prepared["protected_block_manifest"]}
        assert "instructions" in manifest
        assert any(p["authority"] == "user" for p in manifest.values())
        with pytest.raises(ApiError) as err:
            await c.check_model_call(run, prepared)
    assert err.value.code == "protected_block_violation"
    assert err.value.details["violation"] == violation
    assert err.value.details["hook"] == "hook:marker@3"
    assert await _calls(db, run.session_id) == []


@pytest.mark.spec("R15.1", "R6.4", "R18")
async def test_model_call_record_keeps_final_input_and_usage_and_calibrates_drift(
    gw: Services, db: asyncpg.Pool
) -> None:
    model = f"calib-{uuid.uuid4().hex[:6]}"  # calibration is per model: keep it to this test
    async with client(gw) as c:
        run = await _ask(c, "What changed?", model_profile=SMALL | {"name": model})
        prepared = await c.prepare(run)
        call = await c.check_model_call(run, prepared, {"temperature": 0.2})
        replay = await c.check_model_call(run, prepared, {"temperature": 0.2})
        assert replay["call_id"] == call["call_id"] and replay["idempotent_replay"]
        assert replay["request"] == call["request"]
        estimate = call["budget"]["final_estimated_input_raw"]
        reported = int(estimate * 1.25)
        out = await c.report_model_result(
            run,
            call["call_id"],
            {"content": "It changed."},
            {"input_tokens": reported, "output_tokens": 4},
        )
        assert out["drift"]["drift_ratio"] == pytest.approx(reported / estimate - 1, abs=1e-6)
        nxt = await c.prepare(run)
    row = (await _calls(db, run.session_id))[0]
    final = await db.fetchval(
        "SELECT convert_from(content, 'UTF8') FROM blobs WHERE sha256=$1",
        row["final_input_sha256"],
    )
    assert json.loads(final) == call["request"]  # the exact final input, by reference
    assert (
        row["tool_catalog_version"]
        == hashlib.sha256(
            json.dumps(prepared["tools"], sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()
    )
    assert row["model_config"]["temperature"] == 0.2
    assert row["model_config"]["model"] == model
    assert row["usage"] == {
        "input_tokens": reported,
        "fresh_input_tokens": reported,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 4,
        "reasoning_tokens": 0,
        "cache_share": 0.0,
    }
    assert row["response_sha256"] is not None
    assert (
        row["dependency_versions"]["policy_revision"]
        == prepared["dependency_versions"]["policy_revision"]
    )
    assert row["manifest"] == prepared["protected_block_manifest"]
    # Usage calibrates later estimates upward (never downward), and says so.
    cal = nxt["budget"]["calibration"]
    assert cal["samples"] == 1 and cal["factor"] == pytest.approx(reported / estimate, rel=1e-4)
    assert nxt["budget"]["calibrated_input"] > nxt["budget"]["estimated_input"]


@pytest.mark.spec("R12.4", "R14")
async def test_material_merges_by_citation_and_a_prepare_hook_adds_authorized_material(
    gw: Services,
) -> None:
    async with client(gw) as c:
        run = await _ask(c, "What does the runbook say?")
        passage = {
            "citation_id": "rb-1",
            "version": "4",
            "text": "Restart the pod.",
            "source": "kb",
        }
        out = await c.prepare(
            run,
            material=[
                passage,
                passage,  # a duplicate: merged
                passage | {"version": "5", "text": "Drain the node first."},  # conflicting
                {"citation_id": "ask-hook", "version": "1", "text": "placeholder"},
            ],
        )
    mats = [m for m in out["messages"] if m["block"] == "material"]
    assert all(m["role"] == "user" for m in mats)  # never an instruction
    assert [m["block_id"].split(":")[1].split("@")[0] for m in mats] == ["rb-1", "rb-1", "kb-7"]
    assert mats[0]["reason"] == "merged_duplicates"
    assert "conflict" in mats[0]["content"] and "conflict" in mats[1]["content"]
    assert mats[2]["origins"] == ["hook:marker@3"]
    assert out["budget"]["items"]["material"] > 0


@pytest.mark.spec("R5.4", "R10.3", "R19")
async def test_one_group_over_budget_is_shown_as_views_readable_back_through_read_content(
    gw: Services,
) -> None:
    big = [" ".join(f"line{i}-{k}" for k in range(1200)) for i in range(3)]  # ~3.5k tokens each
    huge = "x" * 70_000 + " tail-marker"  # over 64 KiB: lives in the blob store
    async with client(gw) as c:
        run = await _ask(
            c, "Compare the three logs.", model_profile=SMALL | {"context_capacity": 8000}
        )
        calls = [
            (f"g-{i}", "read_file", json.dumps({"path": f"/var/log/{i}.log"})) for i in range(4)
        ]
        await c.append_model_result(run, "Reading all logs.", "g-m", calls)
        for i, text in enumerate([*big, huge]):
            await c.append_tool_outcome(run, f"g-{i}", "read_file", text)
        out = await c.prepare(run)
        assert out["budget"]["estimated_input"] <= out["budget"]["input_budget"]
        msgs = out["messages"]
        asst = next(m for m in msgs if m.get("tool_calls"))
        # One assistant message, all four calls, JSON arguments intact (R5.1, R5.4).
        assert [(t["id"], json.loads(t["arguments"])) for t in asst["tool_calls"]] == [
            (f"g-{i}", {"path": f"/var/log/{i}.log"}) for i in range(4)
        ]
        tools = [m for m in msgs if m["role"] == "tool"]
        assert [t["tool_call_id"] for t in tools] == [f"g-{i}" for i in range(4)]
        for t in tools:
            assert t["decision"] == "externalized" and t["status"] == "ok"
            assert "result truncated" in t["content"] and t["tool_call_id"] in t["content"]
        assert out["read_content_tool"]["name"] == "read_content"
        assert out["tools"][-1]["name"] == "read_content"  # offered, and its schema counted
        # The model's read_content call, executed by the runtime: paged, complete.
        ref = tools[3]["content_ref"]
        assert f'ref="{ref}"' in tools[3]["content"]
        page = await c.read_content(run, ref, offset=69_990, limit=100)
        assert page["content"] == "x" * 10 + " tail-marker" and page["next_offset"] is None
        first = await c.read_content(run, tools[0]["content_ref"], 0, 50)
        assert first["content"] == big[0][:50] and first["total_chars"] == len(big[0])


@pytest.mark.spec("R6.2", "R10.4", "R19")
async def test_oversized_tool_schema_is_context_budget_exceeded_with_itemized_sizes(
    gw: Services,
) -> None:
    schema = [
        {
            "name": "giant",
            "description": "word " * 4000,
            "parameters": {"type": "object", "properties": {}},
        }
    ]
    async with client(gw) as c:
        run = await _ask(c, "Use the giant tool.")
        with pytest.raises(ApiError) as err:
            await c.prepare(run, tool_catalog=schema)
    d = err.value.details
    assert err.value.code == "context_budget_exceeded" and d["reason"] == "required_over_budget"
    assert d["items"]["tool_schemas"] > d["input_budget"]
    assert {"instructions", "tool_schemas", "task", "envelope"} <= set(d["items"])


@pytest.mark.spec("R4.1", "R11.3")
async def test_purposes_verification_is_completion_and_compaction_gets_no_tools(
    gw: Services,
) -> None:
    async with client(gw) as c:
        run = await _ask(c, "Check the answer.")
        action = await c.prepare(run)
        verification = await c.prepare(run, purpose="verification")
        compaction = await c.prepare(run, purpose="compaction")
        with pytest.raises(ApiError) as bad:
            await c.prepare(run, purpose="chitchat")
    assert verification["purpose"] == "completion"
    assert verification["messages"] == action["messages"]
    assert action["tools"] and action["budget"]["items"]["tool_schemas"] > 0
    assert compaction["tools"] == [] and compaction["budget"]["items"]["tool_schemas"] == 0
    assert bad.value.code == "invalid_request"


@pytest.mark.spec("R3.3", "R10.3", "R15.4")
async def test_read_content_does_not_reach_another_threads_private_record(gw: Services) -> None:
    import dataclasses

    from schemas.contracts import Authority, Content, RecordKind, UserInputPayload, Visibility

    async with client(gw) as c:
        first = await _ask(c, "First question.")
        ev = c._event(
            first,
            RecordKind.USER_INPUT,
            Authority.USER,
            Content.text("my private note"),
            UserInputPayload(),
            "private-1",
        )
        await c.append(dataclasses.replace(ev, visibility=Visibility.PRIVATE))
        await c.prepare(first)  # committed
        sid = first.session_id
        rid = (await c._call("GET", f"/v1/sessions/{sid}/events/private-1"))["record_id"]
        own = await c.read_content(first, f"rec:{rid}")
        assert own["content"] == "my private note"  # its own thread reads it
        await c.finish_run(first)
        second = await c.start_run(await c._call("GET", f"/v1/sessions/{sid}"))
        with pytest.raises(ApiError) as err:
            await c.read_content(second, f"rec:{rid}")
    assert err.value.code == "not_granted"


@pytest.mark.spec("R15.3", "R6.4")
async def test_a_usage_past_64_bits_is_refused_and_the_call_can_still_be_reported(
    gw: Services, db: asyncpg.Pool
) -> None:
    """Found by schemathesis: a usage of 10**34 was a 500 (the jsonb encoder's 'Integer
    exceeds 64-bit range'). It is a 422 of our shape; the call stays open for a good
    report."""
    async with client(gw) as c:
        run = await _ask(c, "How big?")
        prepared = await c.prepare(run)
        call = await c.check_model_call(run, prepared)
        with pytest.raises(ApiError) as bad:
            await c.report_model_result(run, call["call_id"], {}, {"input_tokens": 10**34})
        assert (bad.value.status, bad.value.code) == (422, "invalid_request")
        assert "64 bits" in str(bad.value.details)
        out = await c.report_model_result(
            run, call["call_id"], {"content": "ok"}, {"input_tokens": 10, "output_tokens": 1}
        )
        assert out["status"] == "completed"
    row = (await _calls(db, run.session_id))[0]
    assert row["usage"] == {
        "input_tokens": 10,
        "fresh_input_tokens": 10,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 1,
        "reasoning_tokens": 0,
        "cache_share": 0.0,
    }
