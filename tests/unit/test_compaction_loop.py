"""The compaction service's request loop with hand-written fakes (no broker, no database):
quarantine after N worker failures, transient errors retried, bad bytes dead-lettered,
expired jobs skipped (R15.3)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from aiokafka import ConsumerRecord

from schemas.wire import (
    CompactionOutcome,
    CompactionRequest,
    decode_control,
    decode_dead_letter,
    encode_compaction_request,
)
from services.compaction.__main__ import LoopConfig, RequestLoop, transient

REQ = CompactionRequest(
    "cmp_1", "ses_1", "run_1", "ins_1", 9, None, "pol_1", 1, ("user_turns",), 100, 1000, 600, 4, 0
)


class FakeWorker:
    def __init__(self, errors: list[Exception]) -> None:
        self.errors, self.calls = list(errors), 0

    async def handle(self, req: CompactionRequest) -> CompactionOutcome:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return CompactionOutcome(req.job_id, "succeeded", "save")


class FakePool:
    def __init__(self, status: str = "requested") -> None:
        self.status, self.saved = status, []  # type: list[Any]

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return self.status

    async def execute(self, sql: str, *args: Any) -> str:
        self.saved.append(args)
        return "INSERT 0 1"


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes]] = []

    async def send_and_wait(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        self.sent.append((topic, key, value))


def record(value: bytes | None, offset: int = 7) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        "requests", 2, offset, 0, 0, b"ses_1", value, None, 5, len(value or b""), ()
    )


def loop(worker: FakeWorker, pool: FakePool, producer: FakeProducer) -> RequestLoop:
    return RequestLoop(worker, pool, producer, LoopConfig("records", "dead", 3, 5.0))  # type: ignore[arg-type]


@pytest.mark.spec("R15.3")
async def test_a_request_raising_3_times_is_quarantined_with_a_failed_outcome() -> None:
    worker = FakeWorker([KeyError("a"), KeyError("b"), KeyError("c"), KeyError("never")])
    pool, producer = FakePool(), FakeProducer()
    await loop(worker, pool, producer).consume(record(encode_compaction_request(REQ)))
    assert worker.calls == 3
    (dead_topic, _, dead), (out_topic, key, out) = producer.sent
    dl = decode_dead_letter(dead)
    assert dead_topic == "dead" and dl.reason_code == "compaction_worker_failed"
    assert "3 times" in dl.reason and "KeyError" in dl.reason
    assert (dl.source_topic, dl.source_partition, dl.source_offset) == ("requests", 2, 7)
    assert (dl.session_id, dl.event_key) == ("ses_1", "cmp_1")
    outcome = decode_control(out).body
    assert out_topic == "records" and key == b"ses_1"
    assert isinstance(outcome, CompactionOutcome)
    assert (outcome.status, outcome.stage) == ("failed", "worker")
    assert pool.saved and pool.saved[0][0] == "cmp_1"  # saved before anything is published


@pytest.mark.spec("R15.3")
async def test_connection_loss_is_retried_and_not_counted_against_the_request() -> None:
    lost = asyncpg.ConnectionDoesNotExistError("connection was closed")
    worker = FakeWorker([lost, ConnectionResetError(), KeyError("x"), lost])
    producer = FakeProducer()
    await loop(worker, FakePool(), producer).consume(record(encode_compaction_request(REQ)))
    assert worker.calls == 5 and producer.sent == []  # succeeded on the 5th call


@pytest.mark.spec("R15.3")
@pytest.mark.parametrize(("value", "code"), [(b"\x00junk", "bad_header"), (None, "undecodable")])
async def test_unreadable_bytes_are_dead_lettered(value: bytes | None, code: str) -> None:
    worker, producer = FakeWorker([]), FakeProducer()
    await loop(worker, FakePool(), producer).consume(record(value))
    ((topic, _, data),) = producer.sent
    dl = decode_dead_letter(data)
    assert topic == "dead" and dl.reason_code == code and dl.value == value
    assert worker.calls == 0


@pytest.mark.spec("R15.3")
async def test_an_expired_job_is_skipped_without_a_model_call() -> None:
    worker, producer = FakeWorker([]), FakeProducer()
    await loop(worker, FakePool("expired"), producer).consume(
        record(encode_compaction_request(REQ))
    )
    assert worker.calls == 0 and producer.sent == []


def test_transient_means_infrastructure_only() -> None:
    from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

    assert transient(asyncpg.ConnectionDoesNotExistError("x"))
    assert transient(asyncpg.CannotConnectNowError("x"))
    assert transient(ConnectionRefusedError()) and transient(TimeoutError())
    assert transient(KafkaConnectionError()) and transient(KafkaTimeoutError())
    assert not transient(KeyError("x")) and not transient(ValueError())
    assert not transient(asyncpg.UniqueViolationError("x"))
