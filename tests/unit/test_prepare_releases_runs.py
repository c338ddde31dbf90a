"""Prepare's release and run use cases on fakes (issue 11): what is stored, published and
refused, without PostgreSQL or Kafka."""

from __future__ import annotations

import pytest

from domain.auth import Action, KeyKind
from domain.planning.state import RunState
from schemas.errors import (
    Conflict,
    NotFound,
    NotGranted,
    ReleaseConflict,
    RunActive,
    RunNotActive,
    Unauthenticated,
)
from schemas.wire import decode_event as decode
from services.prepare.bodies import FinishIn, ReleaseIn, RunIn, RunLifecycleIn, SessionIn
from storage.sessions import Refusal
from tests.unit.fakes.prepare import PROFILE, PrepareWorld


def release(**changes: object) -> ReleaseIn:
    body = {"release_id": "rel_a", "agent_id": "agent", "instructions": "Be brief."}
    return ReleaseIn.model_validate(body | {"model_profile": PROFILE} | changes)


@pytest.mark.spec("R1.4", "R17")
async def test_a_release_is_frozen_its_retry_answered_alike_other_content_refused() -> None:
    w = PrepareWorld()
    first = await w.svc.releases.register(release(), "space")
    again = await w.svc.releases.register(release(), "space")
    assert again == first
    with pytest.raises(ReleaseConflict) as exc:
        await w.svc.releases.register(release(instructions="Be verbose."), "space")
    assert exc.value.details["fields"] == ["instructions"]
    stored = w.releases.rows["rel_a"]
    assert stored.instructions == "Be brief."
    # The policy is stored with its defaults explicit and parsed once, with the row.
    assert stored.policy.compaction.context_ratio == 0.8


@pytest.mark.spec("R15.4")
async def test_a_release_id_of_another_space_is_taken_and_its_release_not_found() -> None:
    w = PrepareWorld()
    await w.svc.releases.register(release(), "space-a")
    with pytest.raises(ReleaseConflict, match="taken"):
        await w.svc.releases.register(release(), "space-b")
    key = w.keys.issue("space-b", KeyKind.HOST)
    who = await w.svc.access.authenticate(key, None)
    with pytest.raises(NotFound):
        await w.svc.access.authorized_release("rel_a", who)


@pytest.mark.spec("R1.4")
async def test_a_session_id_reused_with_another_release_is_a_conflict() -> None:
    w = PrepareWorld()
    await w.svc.releases.register(release(), "space")
    await w.svc.releases.register(release(release_id="rel_b"), "space")
    opened = await w.svc.runs.open_session(
        SessionIn(session_id="s1", release_id="rel_a"), "space", "alice"
    )
    assert opened.release_id == "rel_a"
    assert (
        await w.svc.runs.open_session(
            SessionIn(session_id="s1", release_id="rel_a"), "space", "alice"
        )
        == opened
    )
    with pytest.raises(Conflict):
        await w.svc.runs.open_session(
            SessionIn(session_id="s1", release_id="rel_b"), "space", "alice"
        )


async def opened(w: PrepareWorld) -> None:
    await w.svc.releases.register(release(), "space")
    await w.svc.runs.open_session(SessionIn(session_id="s1", release_id="rel_a"), "space", "alice")


@pytest.mark.spec("R1.1", "R1.3")
async def test_a_run_start_is_published_and_waited_for_then_reported() -> None:
    w = PrepareWorld()
    await opened(w)
    w.run("s1", "r1")  # what the processor leaves when it accepts the start
    out = await w.svc.runs.start_run("s1", RunIn(run_id="r1"))
    assert (out.run_id, out.instance_id, out.status) == ("r1", "r1.main", "active")
    [sent] = w.publisher.on("ctx.records")
    assert sent.how == "waited" and sent.key == b"s1"
    event = decode(sent.value)
    assert event.kind.value == "run_started" and event.event_key == "run_started:r1"
    assert w.waiter.waited == [{0: 0}]  # exactly the offset it was published at


@pytest.mark.spec("R1.3")
async def test_a_start_the_processor_refused_is_run_active() -> None:
    w = PrepareWorld()
    await opened(w)
    w.sessions.refusals[("s1", "run_started:r2")] = Refusal("run_active", "r1 is active")
    with pytest.raises(RunActive):
        await w.svc.runs.start_run("s1", RunIn(run_id="r2"))


@pytest.mark.spec("R1.2")
async def test_a_resume_key_derives_from_durable_counters_so_a_retry_is_the_same() -> None:
    w = PrepareWorld()
    await opened(w)
    w.run("s1", "r1", status="finished")
    first = await w.svc.runs.resume_run("s1", "r1", RunLifecycleIn())
    retry = await w.svc.runs.resume_run("s1", "r1", RunLifecycleIn())
    assert first.event_key == retry.event_key
    assert [decode(m.value).event_key for m in w.publisher.sent] == [first.event_key] * 2
    with pytest.raises(NotFound):
        await w.svc.runs.finish_run("s1", "nope", FinishIn())


@pytest.mark.spec("R1.2")
async def test_a_keyed_finish_reports_the_status_after_it_or_its_refusal() -> None:
    w = PrepareWorld()
    await opened(w)
    w.run("s1", "r1")
    w.sessions.runs[("s1", "r1")] = RunState("r1", "r1.main", "finished", ends=1)
    done = await w.svc.runs.finish_run("s1", "r1", FinishIn(event_key="finish:r1"))
    assert (done.instance_id, done.status, done.event_key) == ("r1.main", "finished", "finish:r1")
    assert decode(w.publisher.sent[-1].value).scope.instance_id == "r1.main"
    w.sessions.refusals[("s1", "finish:again")] = Refusal("run_not_active", "r1 is finished")
    with pytest.raises(RunNotActive):
        await w.svc.runs.finish_run("s1", "r1", FinishIn(event_key="finish:again"))
    with pytest.raises(NotFound):
        await w.svc.runs.finish_run("s1", "nope", FinishIn(event_key="finish:nope"))


@pytest.mark.spec("R3.3", "R15.4")
async def test_keys_and_grants_decide_who_reads_a_session() -> None:
    w = PrepareWorld()
    await opened(w)
    with pytest.raises(Unauthenticated):
        await w.svc.access.authenticate("alc_0000000000000000_" + "0" * 64, None)
    bob = await w.svc.access.authenticate(w.keys.issue("space", KeyKind.USER, "bob"), None)
    with pytest.raises(NotGranted):
        await w.svc.access.authorize("s1", bob, Action.SESSION_READ)
    host = await w.svc.access.authenticate(w.keys.issue("space", KeyKind.HOST), "alice")
    await w.svc.readback.grant("s1", host, "bob")
    assert w.sessions.grants[("s1", "bob")][0] == "alice"
    await w.svc.access.authorize("s1", bob, Action.SESSION_READ)
    with pytest.raises(NotGranted):
        await w.svc.access.authorize("s1", bob, Action.SESSION_WRITE)  # a grant is to read only
