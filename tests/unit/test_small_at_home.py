"""The faust driver's two processors (streams.drivers.small_at_home, issue 37): small
batches applied in the faust process, larger ones in the child, and whatever the mix and
the timing, batches are applied one at a time in the order the driver cut them (offsets
after commit, R8.1) — the child orders what it is sent; the rest is ``SmallAtHome``'s."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import NoReturn

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from schemas.errors import StorageUnavailable
from schemas.settings import Settings
from streams import bootstrap
from streams.admission import RawMessage
from streams.bootstrap import with_small_at_home
from streams.drivers.small_at_home import SmallAtHome


def _batch(n: int, first: int) -> list[RawMessage]:
    return [RawMessage(b"k", b"v", 0, first + i, None) for i in range(n)]


class Applied:
    """Both processors' applications, as a database would see them."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.timeline: list[tuple[str, int, str]] = []
        self.queue: asyncio.Queue[tuple[list[RawMessage], asyncio.Future[None]]] = asyncio.Queue()

    async def _apply(self, batch: list[RawMessage], where: str) -> None:
        self.timeline.append(("start", batch[0].offset, where))
        for _ in range(self.rng.randrange(4)):
            await asyncio.sleep(0)
        self.timeline.append(("end", batch[0].offset, where))

    async def home(self, batch: list[RawMessage]) -> None:
        await self._apply(batch, "home")

    async def child(self, batch: list[RawMessage]) -> None:
        """The offloaded child: receives in call order (the frame is written before any
        await), applies one batch after another."""
        done = asyncio.get_running_loop().create_future()
        self.queue.put_nowait((batch, done))
        await done

    async def run_child(self) -> None:
        while True:
            batch, done = await self.queue.get()
            await self._apply(batch, "child")
            done.set_result(None)


async def _drive(sizes: list[int], offload_from: int, seed: int) -> Applied:
    db = Applied(seed)
    worker = asyncio.create_task(db.run_child())
    router = SmallAtHome(db.home, db.child, offload_from)
    rng = random.Random(seed + 1)
    calls, first = [], 0
    for n in sizes:  # called in order, the next one often before the previous returned
        calls.append(asyncio.create_task(router(_batch(n, first))))
        first += n
        for _ in range(rng.randrange(3)):
            await asyncio.sleep(0)
    await asyncio.gather(*calls)
    worker.cancel()
    return db


def _one_at_a_time_in_order(db: Applied, sizes: list[int]) -> None:
    starts = [off for what, off, _ in db.timeline if what == "start"]
    firsts = [sum(sizes[:i]) for i in range(len(sizes))]
    assert starts == firsts  # every batch applied, in offset order
    for k in range(0, len(db.timeline), 2):  # never two applying at once
        (a, off_a, _), (b, off_b, _) = db.timeline[k], db.timeline[k + 1]
        assert (a, b) == ("start", "end") and off_a == off_b


@pytest.mark.spec("R8.1")
@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=25),
    offload_from=st.sampled_from([1, 8, 32, 1000]),
    seed=st.integers(0, 10_000),
)
def test_batches_apply_one_at_a_time_in_order_wherever_each_goes(
    sizes: list[int], offload_from: int, seed: int
) -> None:
    db = asyncio.run(_drive(sizes, offload_from, seed))
    _one_at_a_time_in_order(db, sizes)


@pytest.mark.spec("R8.1")
async def test_a_small_batch_is_applied_here_and_a_large_one_in_the_child() -> None:
    db = await _drive([3, 40, 2, 31, 32, 5], offload_from=32, seed=7)
    where = {off: place for what, off, place in db.timeline if what == "start"}
    assert [where[f] for f in (0, 3, 43, 45, 76, 108)] == [
        "home", "child", "home", "home", "child", "home"
    ]  # fmt: skip


async def _never(batch: list[RawMessage]) -> None:
    raise AssertionError("not this handler")


@pytest.mark.parametrize("offload_from", [1, 2, 32])
async def test_settings_processor_offload_from_decides_where_small_batches_go(
    offload_from: int,
) -> None:
    """``ALC_PROCESSOR_OFFLOAD_FROM``, through the handler the faust driver is given: a
    batch of fewer messages is applied in this process, one of that many or more goes to
    the child; 1 sends every batch to the child (and builds no processor here)."""
    went: list[tuple[str, int]] = []
    built: list[str] = []

    async def child(batch: list[RawMessage]) -> None:
        went.append(("child", len(batch)))

    async def applied_here(batch: list[RawMessage]) -> None:
        went.append(("here", len(batch)))

    async def home() -> Callable[[list[RawMessage]], Awaitable[None]]:
        built.append("home")
        return applied_here

    handler = await with_small_at_home(Settings(processor_offload_from=offload_from), child, home)
    sizes = [1, offload_from - 1, offload_from, 100]
    for n in sizes:
        if n > 0:
            await handler(_batch(n, 0))
    assert went == [("here" if n < offload_from else "child", n) for n in sizes if n > 0]
    assert built == ([] if offload_from == 1 else ["home"])
    with pytest.raises(ValidationError):
        Settings(processor_offload_from=0)


async def test_the_faust_processs_pool_opened_or_the_process_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No pool for the processor in the faust process: the process exits to start again
    (crash-only), as it does when its child cannot open one; the error never reaches
    faust, which would ack the batch it was taking."""
    exits: list[str] = []

    def exit_for_redelivery(why: str) -> NoReturn:
        exits.append(why)
        raise SystemExit(70)

    async def open_pool(settings: Settings) -> None:
        raise StorageUnavailable("database unreachable")

    monkeypatch.setattr(bootstrap, "exit_for_redelivery", exit_for_redelivery)
    monkeypatch.setattr(bootstrap, "open_pool", open_pool)
    with pytest.raises(SystemExit):
        await bootstrap.pool_or_exit(Settings())
    assert exits == ["the processor's database pool could not be opened"]
