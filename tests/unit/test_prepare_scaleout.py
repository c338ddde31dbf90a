"""Stateless Prepare on fakes (issue 13): two instances over the same stores serve one
session interchangeably — a context prepared on one is checked by the other, and the
usage reported on one calibrates the other's estimates."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from domain.window.budget import Calibration
from schemas.errors import NotFound
from services.prepare.assembly import prepared as prepared_module
from services.prepare.assembly.prepared import PreparedEntry
from services.prepare.bodies import ModelCallIn, ModelResultIn, PrepareIn, ReleaseIn, SessionIn
from storage.calls.prepared_contexts import PreparedRow
from tests.unit.fakes.prepare import PROFILE, PrepareWorld


async def instance_a() -> PrepareWorld:
    a = PrepareWorld()
    body = {
        "release_id": "rel",
        "agent_id": "a",
        "instructions": "Answer.",
        "model_profile": PROFILE,
    }
    await a.svc.releases.register(ReleaseIn.model_validate(body), "space")
    await a.svc.runs.open_session(SessionIn(session_id="s1", release_id="rel"), "space", "alice")
    a.run("s1", "r1")
    a.say("s1", "r1", "user_input", "What is the weather?")
    return a


@pytest.mark.spec("R10.5", "R15.1")
async def test_a_context_prepared_on_one_instance_is_checked_and_reported_on_another() -> None:
    a = await instance_a()
    b = a.instance()
    prepared = await a.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    call = await b.svc.gateway.model_call("s1", "r1", ModelCallIn(prepared_id=prepared.prepared_id))
    assert call.status == "ready" and not call.idempotent_replay
    # B had it in no memory: read from the store (waiting for A's write behind its answer)
    assert a.prepared.loads >= 1 and prepared.prepared_id in a.prepared.rows
    sent = [m["content"] for m in call.request["messages"]]
    assert sent == [m["content"] for m in prepared.messages]
    # The same call retried on A is the one B recorded.
    again = await a.svc.gateway.model_call(
        "s1", "r1", ModelCallIn(prepared_id=prepared.prepared_id)
    )
    assert again.idempotent_replay and again.call_id == call.call_id
    done = await a.svc.gateway.model_result("s1", call.call_id, ModelResultIn(usage={}))
    assert done.status == "completed"


@pytest.mark.spec("R10.5")
async def test_a_context_of_another_run_or_pruned_is_not_found_on_any_instance() -> None:
    a = await instance_a()
    prepared = await a.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    b = a.instance()
    a.run("s1", "r2")
    with pytest.raises(NotFound):  # held for r1 only
        await b.svc.gateway.model_call("s1", "r2", ModelCallIn(prepared_id=prepared.prepared_id))
    assert await a.prepared.prune(0.0) == 1
    with pytest.raises(NotFound) as exc:
        await a.instance().svc.gateway.model_call(
            "s1", "r1", ModelCallIn(prepared_id=prepared.prepared_id)
        )
    assert exc.value.details["reason"] == "prepared_not_found"


@pytest.mark.spec("R6.4")
async def test_usage_reported_on_one_instance_calibrates_the_other_within_the_cache_ttl() -> None:
    a = await instance_a()
    b = a.instance()
    first = await a.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    assert "calibration" not in first.budget.model_fields_set
    call = await b.svc.gateway.model_call("s1", "r1", ModelCallIn(prepared_id=first.prepared_id))
    estimated = call.budget.final_estimated_input_raw
    usage = {"input_tokens": estimated * 3 // 2}
    await b.svc.gateway.model_result("s1", call.call_id, ModelResultIn(usage=usage))
    factor = a.calibrations.rows[("space", "m")].factor
    assert factor == pytest.approx(1.5, rel=0.01)
    # B folded the report in: its own next prepare uses it at once.
    on_b = await b.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    assert on_b.budget.calibration.factor == round(factor, 6)
    # A read "no calibration yet" moments ago and keeps it for the cache's TTL, then
    # reads what B stored.
    cached = await a.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    assert "calibration" not in cached.budget.model_fields_set
    a.clock[0] += a.options.calibration_ttl_s
    on_a = await a.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    assert on_a.budget.calibration == on_b.budget.calibration
    assert on_a.budget.calibrated_input > on_a.budget.estimated_input


@pytest.mark.spec("R6.4", "R15.1")
async def test_reports_of_one_call_on_two_instances_calibrate_once() -> None:
    a = await instance_a()
    b = a.instance()
    prepared = await a.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    call = await a.svc.gateway.model_call("s1", "r1", ModelCallIn(prepared_id=prepared.prepared_id))
    usage = ModelResultIn(usage={"input_tokens": call.budget.final_estimated_input_raw})
    first = await a.svc.gateway.model_result("s1", call.call_id, usage)
    second = await b.svc.gateway.model_result("s1", call.call_id, usage)
    assert second.drift == first.drift and first.drift is not None
    assert a.calibrations.rows[("space", "m")].samples == 1


@pytest.mark.spec("R6.4")
async def test_a_model_without_a_stored_calibration_is_seeded_from_its_last_reports() -> None:
    from storage.calls.model_calls import Usage

    a = await instance_a()
    a.model_calls.reported = [Usage("space", "m", 100, 120), Usage("space", "other", 100, 90)]
    a.calibrations.rows[("space", "other")] = Calibration(2.0, 9, 0.1)
    await a.svc.gateway.seed_calibration()
    assert a.calibrations.rows[("space", "m")] == Calibration(1.2, 1, pytest.approx(0.2))
    assert a.calibrations.rows[("space", "other")].samples == 9  # a stored one is never replaced


@pytest.mark.spec("R10.5")
async def test_the_stored_form_of_a_prepared_context_is_the_context() -> None:
    a = await instance_a()
    a.calibrations.rows[("space", "m")] = Calibration(1.123456789012, 3, 0.0987654321)
    prepared = await a.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    held = await a.svc.gateway.prepared.get(prepared.prepared_id)
    assert held is not None and held.report.calibration is not None
    back = PreparedEntry.from_json(held.to_json())
    assert back == held
    stored = orjson.loads(held.to_json())["manifest"]  # each block as its to_dict
    assert held.manifest and stored == [p.to_dict() for p in held.manifest]
    assert back.report.calibration == held.report.calibration  # every digit of the factor


@pytest.mark.spec("R10.5")
async def test_a_context_not_stored_at_all_is_not_found_after_a_bounded_wait() -> None:
    a = await instance_a()
    b = a.instance()
    b.svc.gateway.prepared.miss_wait_s = 0.2
    assert await b.svc.gateway.prepared.get("prep_never_written") is None
    assert a.prepared.loads >= 2  # it looked again before giving up


@pytest.mark.spec("R10.5")
async def test_contexts_prepared_while_a_write_is_in_flight_are_stored_in_one_statement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a = await instance_a()
    released = asyncio.Event()
    save_many = a.prepared.save_many

    async def in_flight(rows: list[PreparedRow]) -> None:
        await released.wait()  # the first write stays in flight until released
        await save_many(rows)

    monkeypatch.setattr(a.prepared, "save_many", in_flight)
    ids = [
        await a.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion")) for _ in range(3)
    ]
    released.set()
    await a.svc.gateway.prepared.flush()
    assert sorted(a.prepared.rows) == sorted(p.prepared_id for p in ids)
    # the three in fewer statements: those prepared while the first write was in flight
    # (or before the writer ran) together
    assert sum(a.prepared.batches) == 3 and len(a.prepared.batches) < 3
    b = a.instance()  # every one readable by another instance, as stored
    for p in ids:
        held = await b.svc.gateway.prepared.get(p.prepared_id)
        assert held is not None and held.messages == p.messages


@pytest.mark.spec("R10.5")
async def test_a_batch_that_fails_is_written_one_by_one_and_capped_in_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a = await instance_a()
    monkeypatch.setattr(prepared_module, "WRITE_ROWS", 2)
    failing = a.prepared.save_many

    async def refuse_batches(rows: list[PreparedRow]) -> None:
        if len(rows) > 1:  # a statement of many fails (a lost connection, a bad row)
            a.prepared.batches.append(-len(rows))
            raise ConnectionError("connection lost")
        await failing(rows)

    monkeypatch.setattr(a.prepared, "save_many", refuse_batches)
    ids = [
        await a.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion")) for _ in range(3)
    ]
    await a.svc.gateway.prepared.flush()
    assert sorted(a.prepared.rows) == sorted(p.prepared_id for p in ids)  # none lost
    assert max(abs(n) for n in a.prepared.batches) <= 2  # no statement over the cap
