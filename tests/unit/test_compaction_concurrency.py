"""Concurrent compaction jobs on fakes (issue 13, R15.3): the number of jobs at once is
bounded, a session's requests run one after the other in offset order, a partition's
offset is never committed past an unfinished request, and a crash mid-batch redelivers
only the unfinished ones — a finished one redelivered republishes its saved outcome with
no second model call."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import ConsumerRecord, TopicPartition

from domain.context.tokens import CachedCounter
from schemas.settings import Settings
from schemas.wire import CompactionRequest, encode_compaction_request
from services.compaction import bootstrap
from services.compaction.consume import HandOver, consume_until
from services.compaction.dispatch import Dispatcher, PartitionOffsets
from services.compaction.outcomes import outcome_of
from services.compaction.scripted import ScriptedSummarizer
from storage.tokenizers import make_counter
from tests.unit.fakes.compaction import (
    FakeCompactionJobs,
    FakeRequestConsumer,
    HeldGateway,
    history,
    request_record,
)
from tests.unit.fakes.publisher import FakePublisher

TP0, TP1 = TopicPartition("requests", 0), TopicPartition("requests", 1)
SETTINGS = Settings(topic_records="records", topic_dead_letter="dead")
COUNTER = CachedCounter(make_counter("cl100k_base"))


async def until(cond: Callable[[], bool], steps: int = 20_000) -> None:
    """Let the event loop run until ``cond`` holds (counted in loop turns, not time)."""
    for _ in range(steps):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


def rec(tp: TopicPartition, offset: int, session: str) -> ConsumerRecord[bytes, bytes]:
    return request_record(tp, offset, f"{session}:{offset}".encode(), session)


class Gates:
    """A handler whose requests wait for their offset's gate; records what ran when."""

    def __init__(
        self, held: set[int] | None = None, turns: Callable[[int], int] | None = None
    ) -> None:
        self.held = held
        self.turns = turns or (lambda offset: 0)  # loop turns a request takes, by offset
        self.open = asyncio.Event()
        self.running: set[tuple[str, int]] = set()
        self.peak = 0
        self.events: list[tuple[str, str, int]] = []  # (start|end, session, offset)
        self.done: set[int] = set()

    async def __call__(self, m: ConsumerRecord[bytes, bytes]) -> None:
        session = m.key.decode()
        self.events.append(("start", session, m.offset))
        self.running.add((session, m.offset))
        self.peak = max(self.peak, len(self.running))
        if self.held is None or m.offset in self.held:
            await self.open.wait()
        for _ in range(self.turns(m.offset)):
            await asyncio.sleep(0)
        self.running.discard((session, m.offset))
        self.events.append(("end", session, m.offset))
        self.done.add(m.offset)


async def test_no_more_jobs_run_at_once_than_the_concurrency() -> None:
    gates = Gates()  # every request waits for the gate
    jobs = Dispatcher(gates, concurrency=3)
    for i in range(10):
        jobs.submit(rec(TP0, i, f"ses_{i}"))
    await until(lambda: jobs.running == 3)
    for _ in range(50):  # others are ready to start: the bound holds them back
        await asyncio.sleep(0)
    assert jobs.running == 3 and len(gates.running) == 3
    gates.open.set()
    await until(lambda: len(gates.done) == 10)
    assert gates.peak == 3


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_a_sessions_requests_run_one_after_the_other_in_offset_order(
    concurrency: int,
) -> None:
    gates = Gates(held=set(), turns=lambda offset: (offset * 7) % 5)  # uneven job lengths
    jobs = Dispatcher(gates, concurrency)
    sessions = ["ses_a", "ses_b", "ses_c"]
    for i in range(12):
        jobs.submit(rec(TP0, i, sessions[i % 3]))
    await until(lambda: len(gates.done) == 12)
    for s in sessions:
        mine = [(what, off) for what, ses, off in gates.events if ses == s]
        offsets = [off for what, off in mine if what == "start"]
        assert offsets == sorted(offsets) and len(offsets) == 4
        # Each start follows the previous request's end: never two of one session at once.
        assert [what for what, _ in mine] == ["start", "end"] * 4
    assert gates.peak == min(concurrency, 3)


def test_partition_offsets_stop_at_the_first_unfinished_request() -> None:
    offsets = PartitionOffsets()
    for o in (10, 11, 12, 13):
        offsets.add(o)
    offsets.finish(11)
    offsets.finish(13)
    assert offsets.to_commit() is None  # 10 is unfinished: nothing may be committed
    offsets.finish(10)
    assert offsets.to_commit() == 12  # 12 is unfinished: not past it
    offsets.committed = 12
    assert offsets.to_commit() is None
    offsets.finish(12)
    assert offsets.to_commit() == 14 and offsets.pending == 0


async def test_offsets_are_never_committed_past_an_unfinished_request() -> None:
    gates = Gates(held={2})
    log = {
        TP0: [rec(TP0, i, f"ses_{i}") for i in range(6)],
        TP1: [rec(TP1, 0, "ses_x"), rec(TP1, 1, "ses_y")],
    }
    consumer = FakeRequestConsumer(log)
    stop = asyncio.Event()
    loop = asyncio.create_task(consume_until(stop, consumer, Dispatcher(gates, 4)))
    await until(lambda: {0, 1, 3, 4, 5} <= gates.done and consumer.committed.get(TP1) == 2)
    for _ in range(200):  # more turns of the loop: still nothing past offset 2
        await asyncio.sleep(0)
    assert consumer.committed[TP0] == 2
    assert all(c.get(TP0, 0) <= 2 for c in consumer.commits)
    gates.open.set()
    await until(lambda: consumer.committed[TP0] == 6)
    stop.set()
    await loop


async def test_a_revoked_partition_is_handed_over_after_its_running_jobs() -> None:
    gates = Gates(held={1})
    consumer = FakeRequestConsumer({TP0: [rec(TP0, i, f"ses_{i}") for i in range(3)]})
    jobs = Dispatcher(gates, 4)
    for m in consumer.log[TP0]:
        jobs.submit(m)
    listener = HandOver(jobs, "group")
    listener.consumer = consumer
    revoke = asyncio.create_task(listener.on_partitions_revoked([TP0]))
    await until(lambda: {0, 2} <= gates.done)
    for _ in range(100):
        await asyncio.sleep(0)
    assert not revoke.done() and consumer.commits == []  # waits for offset 1
    gates.open.set()
    await revoke
    assert consumer.commits == [{TP0: 3}] and TP0 not in jobs.offsets


def request(job_id: str, session_id: str) -> CompactionRequest:
    return CompactionRequest(
        job_id,
        session_id,
        "run_3",
        "ins_3",
        12,
        None,
        "pol_1",
        3,
        ("user_turns",),
        100,
        100_000,
        60_000,
        4,
        0,
    )


def service(
    jobs: FakeCompactionJobs, held: frozenset[str] = frozenset()
) -> tuple[Dispatcher, FakePublisher, HeldGateway]:
    """One compaction process over the shared (database) fake, as bootstrap builds it."""
    publisher = FakePublisher()
    gateway = HeldGateway(ScriptedSummarizer(["ok"]), held)
    loop = bootstrap.compose(SETTINGS, jobs, publisher, gateway, COUNTER)
    return Dispatcher(loop.consume, 4), publisher, gateway


@pytest.mark.spec("R15.3")
async def test_a_crash_mid_batch_redelivers_only_the_unpublished_requests() -> None:
    jobs = FakeCompactionJobs(history(3))
    log = {
        TP0: [
            request_record(
                TP0, i, encode_compaction_request(request(f"cmp_{i}", f"ses_{i}")), f"ses_{i}"
            )
            for i in range(4)
        ]
    }
    first = FakeRequestConsumer(log)
    dispatcher, published, gateway = service(jobs, held=frozenset({"cmp_1"}))
    run = asyncio.create_task(consume_until(asyncio.Event(), first, dispatcher))
    await until(lambda: len(published.on("records")) == 3 and "cmp_1" in gateway.waiting)
    await until(lambda: first.committed.get(TP0) == 1)
    run.cancel()  # the crash: cmp_1 is mid-call, cmp_2 and cmp_3 were published
    with pytest.raises(asyncio.CancelledError):
        await run
    assert first.committed[TP0] == 1 and "cmp_1" not in jobs.operations

    # The restarted process resumes from the committed offset.
    second = FakeRequestConsumer(log, start=dict(first.committed))
    dispatcher, republished, gateway = service(jobs)
    stop = asyncio.Event()
    run = asyncio.create_task(consume_until(stop, second, dispatcher))
    await until(lambda: second.committed[TP0] == 4)
    stop.set()
    await run
    outcomes = {outcome_of(m.value).job_id: m.value for m in republished.on("records")}
    assert set(outcomes) == {"cmp_1", "cmp_2", "cmp_3"}  # cmp_0 is not redelivered
    # Only the unfinished job calls the model; the others republish their saved outcome.
    assert {op.split(":")[0] for op in gateway.ops} == {"cmp_1"}
    assert all(outcomes[j] == jobs.operations[j].outcome for j in outcomes)
    assert [outcome_of(v).status for v in outcomes.values()] == ["succeeded"] * 3


def test_the_group_instance_id_is_claimed_per_process_or_given(tmp_path: Path) -> None:
    given = Settings(state_dir=str(tmp_path), compaction_instance_id="compaction-a")
    assert bootstrap.instance_id(given) == "compaction-a"
    first = bootstrap.instance_id(Settings(state_dir=str(tmp_path)))
    second = bootstrap.instance_id(Settings(state_dir=str(tmp_path)))
    # Two live processes on one host never share an id (this test holds both slots).
    assert first.endswith("-compaction-1") and second.endswith("-compaction-2")
