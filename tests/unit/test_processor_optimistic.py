"""What a batch costs besides its work (issue 37). The transaction is optimistic: while
nothing fails, control events and the pre-emptive check run without savepoints (two
round trips each); when one fails, the whole batch is applied again with a savepoint
around each of them, so that the outcome is the one a savepoint gives — the failing part
undone and dead-lettered or skipped, the rest committed once (R15.3). And a session once
seen to exist is not asked for again."""

from __future__ import annotations

import pytest

from domain.compaction.preemption import PreemptCandidate
from domain.policy.context_policy import effective_policy
from schemas.wire import ControlEvent, decode_dead_letter, encode_control, encode_event

from .fakes.processor import InjectedFailure
from .fakes.publisher import FakePublisher
from .test_processor_orchestration import (
    CONFIG,
    SESSION,
    _observation,
    batch,
    control,
    make,
    observation_inputs,
    user,
)


@pytest.mark.spec("R15.3")
async def test_a_batch_that_fails_nowhere_opens_no_savepoint() -> None:
    proc, store = make()
    store.observations[SESSION] = observation_inputs()
    result = await proc.handle(batch(encode_event(user("a")), control("obs-1", 100)))
    assert result.committed == 1
    assert [e.report.event_key for e in store.data.applied if e.report] == ["obs-1"]
    assert "release" not in store.log and "rollback" not in store.log
    assert store.log.count("commit") == 1


@pytest.mark.spec("R15.3")
async def test_a_failing_control_event_rolls_the_batch_back_once_then_fails_alone() -> None:
    proc, store = make()
    store.observations[SESSION] = observation_inputs()
    store.poison_keys = {"obs-bad"}
    result = await proc.handle(
        batch(control("obs-bad", 900), encode_event(user("a")), control("obs-ok", 100))
    )
    assert (result.committed, result.dead_letters) == (1, 1)
    # The optimistic attempt (no savepoint) is undone whole; the careful one commits.
    assert store.log[: store.log.index("commit") + 1].count("rollback") == 2  # tx, savepoint
    assert store.committed_keys() == ["a"]
    assert [e.report.event_key for e in store.data.applied if e.report] == ["obs-ok"]
    pub = proc.publisher
    assert isinstance(pub, FakePublisher)
    (letter,) = [decode_dead_letter(m.value) for m in pub.flushed if m.topic == "ctx.dead"]
    assert (letter.event_key, letter.reason_code) == ("obs-bad", "apply_failed")
    assert pub.on(CONFIG.topic_compaction_requests) == []


class FailingRead:
    """A store read that always fails, counting its calls."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.calls = 0

    async def __call__(self, *args: object) -> object:
        self.calls += 1
        raise InjectedFailure(self.what)


@pytest.mark.spec("R15.3")
async def test_a_failing_preemptive_check_is_skipped_and_the_records_commit_once() -> None:
    proc, store = make()
    policy = effective_policy({"compaction": {"user_turns": 2}})[0]
    store.candidates = [PreemptCandidate(SESSION, "run-1", policy, "pol-1", 10, 10, 1000, 10)]
    read = FailingRead("view unreadable")
    store.main_view = read  # type: ignore[assignment, method-assign]
    result = await proc.handle(batch(encode_event(user("a")), encode_event(user("b"))))
    assert (result.committed, result.dead_letters, result.isolated) == (2, 0, 0)
    assert store.committed_keys() == ["a", "b"]
    assert read.calls == 2  # the optimistic attempt, then the careful one that skips it
    assert store.log.count("commit") == 1


@pytest.mark.spec("R15.3", "R3.1")
async def test_a_failing_read_of_waiting_requests_is_skipped_and_loses_nothing() -> None:
    """Publishing a waiting request again is a repair: a read of it that fails is undone
    and skipped, and the redelivered batch is still a duplicate, not a dead letter."""
    proc, store = make()
    await proc.handle(batch(encode_event(user("a"))))
    read = FailingRead("requests unreadable")
    store.waiting_requests = read  # type: ignore[assignment, method-assign]
    result = await proc.handle(batch(encode_event(user("a")), encode_event(user("b"))))
    assert (result.committed, result.duplicates, result.dead_letters) == (1, 1, 0)
    assert store.committed_keys() == ["a", "b"]
    assert read.calls == 2  # the optimistic attempt, then the careful one that skips it


@pytest.mark.spec("R15.3")
async def test_a_session_seen_to_exist_is_not_asked_for_again() -> None:
    proc, store = make()
    store.observations[SESSION] = observation_inputs()
    asked: list[list[str]] = []
    ask = store.open_sessions

    async def counted(session_ids: list[str]) -> set[str]:
        asked.append(session_ids)
        return await ask(session_ids)

    store.open_sessions = counted  # type: ignore[method-assign]
    await proc.handle(batch(control("obs-1", 100)))
    await proc.handle(batch(control("obs-2", 100)))
    ev = ControlEvent("obs-x", "sess-unknown", "run-1", "main", 0, _observation(900))
    for _ in range(2):  # an unknown session is asked for each time: it may open later
        result = await proc.handle(batch(encode_control(ev), session="sess-unknown"))
        assert result.dead_letters == 1
    assert asked == [[SESSION], ["sess-unknown"], ["sess-unknown"]]
    assert [e.report.event_key for e in store.data.applied if e.report] == ["obs-1", "obs-2"]
