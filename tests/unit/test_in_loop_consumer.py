"""The faust processor's consumer serves on the app's loop unless its thread is asked for
(``ALC_PROCESSOR_CONSUMER_THREAD``, streams.drivers.in_loop)."""

from __future__ import annotations

from pathlib import Path

from faust.transport.drivers import aiokafka as faust_aiokafka

from schemas.settings import Settings
from streams.drivers.app import create_app
from streams.drivers.in_loop import InLoopConsumerThread, InLoopTransport

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
