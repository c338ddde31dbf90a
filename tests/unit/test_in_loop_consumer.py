"""The faust processor's consumer serves on the app's loop unless its thread is asked for
(``ALC_PROCESSOR_CONSUMER_THREAD``, streams.drivers.in_loop), and there fetches nothing
while the faust process applies a batch (``ALC_PROCESSOR_PAUSE_FETCHING``)."""

from __future__ import annotations

from pathlib import Path

import faust
import pytest
from faust.transport.drivers import aiokafka as faust_aiokafka

from schemas.settings import Settings
from streams.admission import RawMessage
from streams.bootstrap import home_handler
from streams.drivers.app import create_app
from streams.drivers.in_loop import InLoopConsumerThread, InLoopTransport, paused_while

# No broker is reached: the app is built, not started (no credentials needed).
SETTINGS = Settings(kafka_security_protocol="PLAINTEXT")


async def _nothing(app: object) -> object:
    raise AssertionError("no batch is built here")


def test_the_faust_processors_consumer_serves_on_the_apps_loop(tmp_path: Path) -> None:
    app = create_app(SETTINGS, tmp_path, _nothing)  # type: ignore[arg-type]
    assert type(app.transport) is InLoopTransport
    thread = app.consumer._thread  # type: ignore[attr-defined]
    assert type(thread) is InLoopConsumerThread
    assert thread.thread_loop is thread.parent_loop


def test_faust_keeps_its_consumer_thread_when_asked(tmp_path: Path) -> None:
    app = create_app(
        SETTINGS.model_copy(update={"processor_consumer_thread": True}), tmp_path, _nothing
    )  # type: ignore[arg-type]
    assert type(app.transport) is faust_aiokafka.Transport
    thread = app.consumer._thread  # type: ignore[attr-defined]
    assert type(thread) is faust_aiokafka.AIOKafkaConsumerThread
    assert thread.thread_loop is not thread.parent_loop


class FakeConsumer:
    """aiokafka's consumer as ``pause_fetching`` and ``resume_fetching`` see it."""

    def __init__(self, assigned: set[int]) -> None:
        self.assigned = set(assigned)
        self.paused_now: set[int] = set()

    def assignment(self) -> set[int]:
        return set(self.assigned)

    def paused(self) -> set[int]:
        return set(self.paused_now)

    def pause(self, *tps: int) -> None:
        assert set(tps) <= self.assigned, "aiokafka refuses to pause what is not assigned"
        self.paused_now |= set(tps)

    def resume(self, *tps: int) -> None:
        assert set(tps) <= self.assigned, "aiokafka refuses to resume what is not assigned"
        self.paused_now -= set(tps)


def _app_with(consumer: FakeConsumer, tmp_path: Path, **update: object) -> faust.App:
    app = create_app(SETTINGS.model_copy(update=update), tmp_path, _nothing)  # type: ignore[arg-type]
    app.consumer._thread._consumer = consumer  # type: ignore[attr-defined]
    return app


async def test_a_batch_applied_here_is_applied_with_fetching_paused(tmp_path: Path) -> None:
    consumer = FakeConsumer({0, 1, 2})
    app = _app_with(consumer, tmp_path)
    during: list[set[int]] = []

    async def apply(batch: list[object]) -> object:
        during.append(consumer.paused())
        return len(batch)

    assert await paused_while(app, apply, 2)([1, 2]) == 2
    assert during == [{0, 1, 2}] and consumer.paused() == set()

    async def failing(batch: list[object]) -> object:
        raise RuntimeError("lost")

    with pytest.raises(RuntimeError):
        await paused_while(app, failing, 1)([1])
    assert consumer.paused() == set()  # fetching again whatever the batch did


async def test_fetching_resumes_only_where_the_partitions_are_still_assigned(
    tmp_path: Path,
) -> None:
    consumer = FakeConsumer({0, 1})
    app = _app_with(consumer, tmp_path)

    async def rebalanced(batch: list[object]) -> object:
        consumer.assigned = {1, 2}  # 0 revoked, 2 assigned (unpaused) meanwhile
        consumer.paused_now &= consumer.assigned
        return None

    await paused_while(app, rebalanced, 1)([1])
    assert consumer.paused() == set()


async def test_fausts_own_consumer_thread_is_not_paused_from_the_apps_loop(
    tmp_path: Path,
) -> None:
    app = create_app(
        SETTINGS.model_copy(update={"processor_consumer_thread": True}), tmp_path, _nothing
    )  # type: ignore[arg-type]

    async def apply(batch: list[object]) -> object:
        return None

    assert paused_while(app, apply, 1) is apply


@pytest.mark.parametrize(
    ("from_", "size", "paused"), [(8, 8, True), (8, 7, False), (1, 1, True), (0, 50, False)]
)
async def test_settings_processor_pause_fetching_from_decides_which_home_batches_pause_fetching(
    tmp_path: Path, from_: int, size: int, paused: bool
) -> None:
    consumer = FakeConsumer({0, 1})
    app = _app_with(consumer, tmp_path)
    during: list[set[int]] = []

    async def apply(batch: list[RawMessage]) -> object:
        during.append(consumer.paused())
        return None

    settings = SETTINGS.model_copy(update={"processor_pause_fetching_from": from_})
    await home_handler(settings, app, apply)(
        [RawMessage(b"k", b"v", 0, i, None) for i in range(size)]
    )
    assert during == [{0, 1} if paused else set()]


def test_faust_elects_no_leader_whose_topic_every_fetch_would_hold(tmp_path: Path) -> None:
    app = create_app(SETTINGS, tmp_path, _nothing)  # type: ignore[arg-type]
    assert app.conf.topic_disable_leader
