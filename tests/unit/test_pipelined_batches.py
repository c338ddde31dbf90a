"""The faust driver's pipelined batches (streams.drivers.pipelined, issue 13): reading goes on
while batches are applied, yet they go to ``apply`` in offset order, at most ``depth`` at
a time, and an event is acked only after the batch holding it — and every batch before
it — was applied (offsets after commit, R8.1)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import crash_only
from streams.drivers import pipelined
from streams.drivers.pipelined import PipelinedBatches, ticking


class Log:
    """Applies and acks in the order they happened; applies can be held open."""

    def __init__(self) -> None:
        self.timeline: list[tuple[str, Any]] = []
        self.applying = 0
        self.most_at_once = 0
        self.gate: asyncio.Event | None = None

    async def apply(self, events: list[int]) -> None:
        self.applying += 1
        self.most_at_once = max(self.most_at_once, self.applying)
        self.timeline.append(("apply", list(events)))
        await asyncio.sleep(0)
        if self.gate is not None:
            await self.gate.wait()
        self.timeline.append(("applied", list(events)))
        self.applying -= 1

    async def ack(self, event: int) -> None:
        self.timeline.append(("ack", event))


def _check(log: Log, n: int, max_: int, depth: int = 1) -> None:
    applied: set[int] = set()
    sent: list[int] = []
    acked: list[int] = []
    for what, x in log.timeline:
        if what == "apply":
            assert 0 < len(x) <= max_
            sent += x
        elif what == "applied":
            applied |= set(x)
        else:
            assert x in applied, f"event {x} acked before its batch was applied"
            acked.append(x)
    assert sent == list(range(n)), "every event applied once, in order"
    assert acked == list(range(n)), "every event acked once, in order"
    assert (1 if n else 0) <= log.most_at_once <= depth


@pytest.mark.spec("R8.1", "R3.2")
@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 60),
    max_=st.integers(1, 9),
    flush_every=st.integers(1, 15),
    depth=st.integers(1, 3),
)
def test_every_event_applied_once_in_order_and_acked_only_after_it(
    n: int, max_: int, flush_every: int, depth: int
) -> None:
    async def go() -> Log:
        log = Log()
        batches = PipelinedBatches(log.apply, log.ack, max_, within=60, depth=depth)
        for i in range(n):
            await batches.add(i)
            if i % flush_every == 0:
                await batches.flush()  # as the timer would, at any moment
        await batches.drain()
        return log

    _check(asyncio.run(go()), n, max_, depth)


@pytest.mark.parametrize("depth", [1, 2])
async def test_reading_goes_on_while_batches_are_applied(depth: int) -> None:
    """The reason for the class: take_events stops reading during its loop body."""
    log = Log()
    log.gate = asyncio.Event()
    batches = PipelinedBatches(log.apply, log.ack, 3, within=60, depth=depth)
    for i in range(3 * depth):
        await batches.add(i)  # each third fills a batch: it goes to apply, held open
    await asyncio.sleep(0.01)
    assert log.applying == depth
    for i in range(3 * depth, 3 * depth + 2):  # still read (buffered) while they are held
        await asyncio.wait_for(batches.add(i), 1)
    assert not any(what == "ack" for what, _ in log.timeline)
    full = asyncio.create_task(batches.add(3 * depth + 2))  # full: waits for room in flight
    await asyncio.sleep(0.01)
    assert not full.done()
    log.gate.set()
    await asyncio.wait_for(full, 1)
    await batches.drain()
    _check(log, 3 * depth + 3, 3, depth)


async def test_a_later_batch_applied_first_is_acked_after_the_earlier_one() -> None:
    order: list[tuple[str, Any]] = []
    first_held = asyncio.Event()

    async def apply(events: list[int]) -> None:
        if events[0] == 0:
            await first_held.wait()  # batch [0, 1] is slow; [2, 3] finishes first
        order.append(("applied", events[0]))

    async def ack(event: int) -> None:
        order.append(("ack", event))

    batches = PipelinedBatches(apply, ack, 2, within=60, depth=2)
    for i in range(4):
        await batches.add(i)
    await asyncio.sleep(0.01)
    assert order == [("applied", 2)]  # the second is done, yet nothing is acked
    first_held.set()
    await batches.drain()
    assert order == [("applied", 2), ("applied", 0)] + [("ack", i) for i in range(4)]


async def test_a_quiet_stream_is_flushed_by_the_timer() -> None:
    log = Log()
    batches = PipelinedBatches(log.apply, log.ack, 1000, within=0.01)
    async with ticking(batches):
        await batches.add(0)
        await batches.add(1)
        for _ in range(200):
            if ("ack", 1) in log.timeline:
                break
            await asyncio.sleep(0.01)
    assert log.timeline == [("apply", [0, 1]), ("applied", [0, 1]), ("ack", 0), ("ack", 1)]


class Exited(BaseException):
    pass


def _exit(code: int) -> None:
    raise Exited(code)


async def test_a_failed_apply_ends_the_process_and_acks_nothing_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(crash_only.os, "_exit", _exit)
    acked: list[int] = []

    async def apply(events: list[int]) -> None:
        if 3 in events:
            raise RuntimeError("the database went away for good")

    async def ack(event: int) -> None:
        acked.append(event)

    batches = PipelinedBatches(apply, ack, 2, within=60)
    with pytest.raises(Exited) as exited:
        for i in range(6):
            await batches.add(i)
        await batches.drain()
    assert exited.value.args == (crash_only.CRASH_EXIT_CODE,)
    assert 2 not in acked and 3 not in acked  # the failed batch (2, 3) is redelivered
    assert acked in ([], [0, 1])  # an earlier batch may or may not have been acked yet


async def test_stopping_the_timer_does_not_cancel_the_batch_in_flight() -> None:
    log = Log()
    log.gate = asyncio.Event()
    batches = PipelinedBatches(log.apply, log.ack, 1000, within=0.005)
    async with ticking(batches):
        await batches.add(0)
        for _ in range(200):  # the timer sent it and now waits on it in _settle
            if log.applying:
                break
            await asyncio.sleep(0.005)
        await batches.add(1)
        await asyncio.sleep(0.02)
    log.gate.set()  # the ticker was cancelled while waiting: the batch still completes
    await batches.drain()
    _check(log, 2, 1000, depth=2)


async def test_an_idle_timer_waits_for_the_next_event_instead_of_waking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 37: background work scales with the load — with nothing buffered, in flight
    or due for acks the timer sleeps until an event comes, then flushes it as before."""
    waits: list[float] = []
    timeout = asyncio.timeout

    def counted(delay: float) -> Any:
        waits.append(delay)
        return timeout(delay)

    patched = SimpleNamespace(**{**vars(asyncio), "timeout": counted})
    monkeypatch.setattr(pipelined, "asyncio", patched)
    log = Log()
    batches = PipelinedBatches(log.apply, log.ack, 1000, within=0.001)
    async with ticking(batches):
        await asyncio.sleep(0.05)  # idle: ~50 periods of the timer
        assert waits == []
        await batches.add(0)
        for _ in range(200):
            if ("ack", 0) in log.timeline:
                break
            await asyncio.sleep(0.005)
        woken = len(waits)
        await asyncio.sleep(0.05)  # idle again once it is acked
    assert log.timeline == [("apply", [0]), ("applied", [0]), ("ack", 0)]
    assert 1 <= woken <= 5 and len(waits) <= woken + 1


@pytest.mark.spec("R8.1")
async def test_a_batch_is_cut_when_the_child_is_free_not_when_a_timer_says() -> None:
    """Group commit: an event for an idle child goes at once, a burst read together goes
    together, and what came while a batch was applied goes the moment it is applied —
    ``within`` (a minute here) only bounds the wait behind a batch that takes long."""
    log = Log()
    log.gate = asyncio.Event()
    batches = PipelinedBatches(log.apply, log.ack, 1000, within=60, depth=3)

    async def seen(entry: tuple[str, Any]) -> None:
        for _ in range(400):
            if entry in log.timeline:
                return
            await asyncio.sleep(0.005)
        raise AssertionError(f"{entry} not within 2 s: {log.timeline}")

    async with ticking(batches):
        await batches.add(0)
        await batches.add(1)  # read in the same burst as 0
        await seen(("apply", [0, 1]))
        for i in (2, 3, 4):  # while [0, 1] is applied: held, not cut by a timer
            await batches.add(i)
        await asyncio.sleep(0.02)
        assert [x for w, x in log.timeline if w == "apply"] == [[0, 1]]
        log.gate.set()
        await seen(("apply", [2, 3, 4]))
        await seen(("ack", 4))
    _check(log, 5, 1000, depth=1)


@pytest.mark.spec("R8.1")
async def test_an_idle_childs_batch_goes_at_once_not_after_a_timer() -> None:
    """A prepare waits for its appends' batch: an idle child takes an event as soon as
    it is read, never after ``within`` (nor after any wait for more to come)."""
    log = Log()
    batches = PipelinedBatches(log.apply, log.ack, 1000, within=60)
    async with ticking(batches):
        await batches.add(0)
        for _ in range(200):
            if ("ack", 0) in log.timeline:
                break
            await asyncio.sleep(0.001)
        assert ("ack", 0) in log.timeline  # within a fraction of a second, not 60 s
        await batches.add(1)
        for _ in range(200):
            if ("ack", 1) in log.timeline:
                break
            await asyncio.sleep(0.001)
    assert [x for w, x in log.timeline if w == "apply"] == [[0], [1]]
    _check(log, 2, 1000)


async def test_a_timer_stopped_as_a_batch_is_applied_stops() -> None:
    """The timer waits for a batch to be applied; a stop that comes in the same step as
    that batch's end is not lost (the driver then waits for the timer to end)."""
    log = Log()
    log.gate = asyncio.Event()
    batches = PipelinedBatches(log.apply, log.ack, 1000, within=60)
    ticker = asyncio.create_task(batches.tick())
    await batches.add(0)
    for _ in range(400):  # sent, and being applied: the timer waits for it to end
        if log.applying:
            break
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.01)
    batches._wake.set()  # the batch's end and the stop, in one step
    ticker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(ticker, 2)
    log.gate.set()
    await batches.drain()
