"""Prepare's prepare, gateway and read-back use cases on fakes (issue 11): the budget
refusal, the wait for compaction, the gateway's record and calibration, and the checks
of a thread's read — without PostgreSQL or Kafka."""

from __future__ import annotations

import pytest

from domain.compaction.triggers import Counters
from schemas.errors import ContextBudgetExceeded, NotFound, NotGranted
from schemas.wire import BudgetObservation, decode_control
from services.prepare.bodies import (
    ModelCallIn,
    ModelResultIn,
    PrepareIn,
    ReleaseIn,
    SessionIn,
)
from storage.blobs import StoredRecord
from storage.compaction.summary_reuse import SummaryRef
from storage.records.threads import SummaryView
from tests.unit.fakes.prepare import PROFILE, PrepareWorld


async def world(policy: dict[str, object] | None = None) -> PrepareWorld:
    w = PrepareWorld()
    body = {
        "release_id": "rel",
        "agent_id": "a",
        "instructions": "Answer.",
        "model_profile": PROFILE,
    }
    await w.svc.releases.register(
        ReleaseIn.model_validate(body | {"context_policy": policy or {}}), "space"
    )
    await w.svc.runs.open_session(SessionIn(session_id="s1", release_id="rel"), "space", "alice")
    w.run("s1", "r1")
    return w


def history(w: PrepareWorld, turns: int, size: int) -> list[str]:
    """``turns`` long exchanges, then a short question; the ids of the long ones."""
    ids = []
    for i in range(turns):
        ids.append(w.say("s1", "r1", "user_input", f"q{i} " + "x" * size).record_id)
        ids.append(
            w.say(
                "s1", "r1", "assistant_message", f"a{i} " + "y" * size, purpose="action"
            ).record_id
        )
    w.say("s1", "r1", "user_input", "And now?")
    return ids


@pytest.mark.spec("R4.1", "R6.1")
async def test_a_prepare_assembles_the_thread_within_the_budget_and_holds_it() -> None:
    w = await world()
    history(w, 1, 10)
    out = await w.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    texts = [m["content"] for m in out.messages]
    assert texts[-1] == "And now?" and "Answer." in texts[0]
    assert out.budget.input_budget == 3400
    assert out.dependency_versions.release_id == "rel"
    assert await w.svc.gateway.prepared.get(out.prepared_id) is not None
    await w.svc.gateway.prepared.flush()  # written behind the answer
    assert out.prepared_id in w.prepared.rows  # stored for any instance (issue 13)


@pytest.mark.spec("R6.3", "R9.7")
async def test_over_the_budget_a_completion_is_refused_and_nothing_is_held() -> None:
    w = await world()
    history(w, 3, 900)
    with pytest.raises(ContextBudgetExceeded):
        await w.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    assert w.publisher.sent == []  # a completion sends no observation


@pytest.mark.spec("R9.1", "R9.7")
async def test_an_action_over_the_budget_waits_for_the_job_and_is_refused_when_it_failed() -> None:
    w = await world()
    history(w, 3, 900)
    w.compaction.outcomes = [None, {"status": "failed", "stage": "summarize", "reason": "x"}]
    with pytest.raises(ContextBudgetExceeded) as exc:
        await w.svc.preparer.prepare("s1", "r1", PrepareIn())
    assert exc.value.details["reason"] == "compaction_failed"
    [obs] = w.publisher.on("ctx.records")
    assert obs.how == "advisory" and obs.key == b"s1"
    seen = decode_control(obs.value).body
    assert isinstance(seen, BudgetObservation) and seen.input_budget == 3400


@pytest.mark.spec("R9.7", "R15.3")
async def test_an_action_over_the_budget_whose_job_is_still_running_may_be_retried() -> None:
    """The bounded wait ran out with the job in flight: nothing is sent, with the same
    code, but retriable (a failed job's refusal is not)."""
    w = await world()
    history(w, 3, 900)
    w.svc.preparer.compaction.wait_s = 0.05  # no outcome comes: the wait runs out
    with pytest.raises(ContextBudgetExceeded) as exc:
        await w.svc.preparer.prepare("s1", "r1", PrepareIn())
    wire = exc.value.to_dict()
    assert (wire["code"], wire["retriable"]) == ("context_budget_exceeded", True)
    assert wire["details"]["reason"] == "compaction_timeout"
    w.compaction.outcomes = [{"status": "failed", "stage": "summarize", "reason": "x"}]
    with pytest.raises(ContextBudgetExceeded) as failed:
        await w.svc.preparer.prepare("s1", "r1", PrepareIn())
    assert failed.value.details["reason"] == "compaction_failed"
    assert failed.value.to_dict()["retriable"] is False


@pytest.mark.spec("R9.7", "R11.1")
async def test_an_action_over_the_budget_is_prepared_on_the_summary_the_job_committed() -> None:
    w = await world()
    covered = history(w, 3, 900)
    summary = SummaryRef("sum1", None, "r1", 0, 6, tuple(covered), Counters(3, 3))
    w.compaction.summaries["sum1"] = SummaryView("sum1", "They talked.", 12, frozenset(covered))
    w.compaction.outcomes = [{"status": "committed", "stage": "done", "reason": None}]
    w.compaction.after_job = (Counters(4, 3), summary)
    out = await w.svc.preparer.prepare("s1", "r1", PrepareIn())
    assert out.dependency_versions.summary_id == "sum1"
    assert out.budget.estimated_input <= out.budget.input_budget
    assert not any("xxxx" in str(m["content"]) for m in out.messages)


@pytest.mark.spec("R10.5", "R15.1", "R6.4")
async def test_the_gateway_records_a_call_once_and_its_usage_calibrates() -> None:
    w = await world()
    history(w, 1, 10)
    prepared = await w.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    body = ModelCallIn(prepared_id=prepared.prepared_id)
    call = await w.svc.gateway.model_call("s1", "r1", body)
    again = await w.svc.gateway.model_call("s1", "r1", body)
    assert (call.idempotent_replay, again.idempotent_replay) == (False, True)
    assert again.request == call.request and len(w.model_calls.inserted) == 1
    estimated = call.budget.final_estimated_input_raw
    usage = {"input_tokens": estimated * 3}  # far off: moves the factor, bounded (x2)
    result = await w.svc.gateway.model_result("s1", call.call_id, ModelResultIn(usage=usage))
    assert result.drift.reported_input == estimated * 3
    assert w.calibrations.rows[("space", "m")].factor > 1.0
    repeat = await w.svc.gateway.model_result("s1", call.call_id, ModelResultIn(usage=usage))
    assert repeat.drift == result.drift  # claimed once: not calibrated twice


@pytest.mark.spec("R10.5")
async def test_a_call_for_a_context_not_held_here_must_prepare_again() -> None:
    w = await world()
    with pytest.raises(NotFound) as exc:
        await w.svc.gateway.model_call("s1", "r1", ModelCallIn(prepared_id="prep_gone"))
    assert exc.value.details["reason"] == "prepared_not_found"


def record(rid: str, visibility: str, instance: str = "r1.main", text: str = "") -> StoredRecord:
    return StoredRecord(
        rid, 1, "r1", instance, "tool_outcome", "tool", visibility, {}, None, text, "res", False
    )


@pytest.mark.spec("R13.2", "R11.8")
async def test_a_thread_reads_its_own_and_shared_records_and_a_child_its_transfer() -> None:
    w = await world()
    w.records.rows[("s1", "shared")] = record("shared", "session", text="0123456789")
    w.records.rows[("s1", "private")] = record("private", "instance", instance="r1.c1")
    page = await w.svc.readback.read_record(
        "s1", "shared", offset=2, limit=3, run_id="r1", instance_id="r1.main"
    )
    assert (page.content, page.next_offset, page.total_chars) == ("234", 5, 10)
    with pytest.raises(NotGranted):
        await w.svc.readback.read_record("s1", "private", run_id="r1", instance_id="r1.main")
    with pytest.raises(NotGranted):
        await w.svc.readback.read_record("s1", "private")  # on behalf of no thread
    page = await w.svc.readback.read_record("s1", "private", run_id="r1", instance_id="r1.c1")
    assert page.content == ""
    with pytest.raises(NotGranted):
        await w.svc.readback.read_record("s1", "shared", run_id="r1", instance_id="r1.c1")
    w.records.transfers[("s1", "r1", "r1.c1")] = ["shared"]
    await w.svc.readback.read_record("s1", "shared", run_id="r1", instance_id="r1.c1")


@pytest.mark.spec("R15.3")
async def test_a_revoked_resource_is_withdrawn_from_read_back() -> None:
    w = await world()
    w.records.rows[("s1", "gone")] = StoredRecord(
        "gone",
        1,
        "r1",
        "r1.main",
        "tool_outcome",
        "tool",
        "session",
        {},
        None,
        "secret",
        "res",
        True,
    )
    page = await w.svc.readback.read_record("s1", "gone")
    assert "secret" not in page.content and "withdrawn" in page.content
