"""The compaction service's request loop with hand-written fakes (no broker, no database):
quarantine after N worker failures, transient errors retried, bad bytes dead-lettered,
expired jobs skipped (R15.3)."""

from __future__ import annotations

import asyncpg
import pytest
from aiokafka import ConsumerRecord

from domain.context.tokens import CachedCounter
from schemas.settings import Settings
from schemas.wire import (
    CompactionOutcome,
    CompactionRequest,
    decode_control,
    decode_dead_letter,
    encode_compaction_request,
)
from services.compaction import bootstrap
from services.compaction.job_loop import RequestLoop
from services.compaction.scripted import ScriptedSummarizer
from storage.tokenizers import make_counter
from streams.faults import is_transient
from tests.unit.fakes.compaction import FakeCompactionJobs, history
from tests.unit.fakes.publisher import FakePublisher

REQ = CompactionRequest(
    "cmp_1", "ses_1", "run_1", "ins_1", 9, None, "pol_1", 1, ("user_turns",), 100, 1000, 600, 4, 0
)
SETTINGS = Settings(
    topic_records="records",
    topic_dead_letter="dead",
    compaction_max_worker_failures=3,
    compaction_transient_retry_s=5.0,
)


class FakeWorker:
    def __init__(self, errors: list[Exception]) -> None:
        self.errors, self.calls = list(errors), 0

    async def handle(self, req: CompactionRequest) -> CompactionOutcome:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return CompactionOutcome(req.job_id, "succeeded", "save")


def record(value: bytes | None, offset: int = 7) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        "requests", 2, offset, 0, 0, b"ses_1", value, None, 5, len(value or b""), ()
    )


def loop(worker: FakeWorker, jobs: FakeCompactionJobs, publisher: FakePublisher) -> RequestLoop:
    return RequestLoop(worker, jobs, publisher, bootstrap.loop_config(SETTINGS))


@pytest.mark.spec("R15.3")
async def test_a_request_raising_3_times_is_quarantined_with_a_failed_outcome() -> None:
    worker = FakeWorker([KeyError("a"), KeyError("b"), KeyError("c"), KeyError("never")])
    publisher = FakePublisher()
    jobs = FakeCompactionJobs(watch=publisher)
    await loop(worker, jobs, publisher).consume(record(encode_compaction_request(REQ)))
    assert worker.calls == 3
    dead, out = publisher.sent
    dl = decode_dead_letter(dead.value)
    assert dead.topic == "dead" and dl.reason_code == "compaction_worker_failed"
    assert "3 times" in dl.reason and "KeyError" in dl.reason
    assert (dl.source_topic, dl.source_partition, dl.source_offset) == ("requests", 2, 7)
    assert (dl.session_id, dl.event_key) == ("ses_1", "cmp_1")
    outcome = decode_control(out.value).body
    assert out.topic == "records" and out.key == b"ses_1"
    assert isinstance(outcome, CompactionOutcome)
    assert (outcome.status, outcome.stage) == ("failed", "worker")
    saved = jobs.operations["cmp_1"]
    assert (saved.status, saved.stage, saved.outcome) == ("failed", "worker", out.value)
    assert jobs.published_at_save == [0]  # saved before anything is published


@pytest.mark.spec("R15.3")
async def test_connection_loss_is_retried_and_not_counted_against_the_request() -> None:
    lost = asyncpg.ConnectionDoesNotExistError("connection was closed")
    worker = FakeWorker([lost, ConnectionResetError(), KeyError("x"), lost])
    publisher = FakePublisher()
    jobs = FakeCompactionJobs(fail_next=[lost])  # reading the job's status fails once
    await loop(worker, jobs, publisher).consume(record(encode_compaction_request(REQ)))
    assert worker.calls == 5 and publisher.sent == []  # succeeded on the 5th call


@pytest.mark.spec("R15.3")
@pytest.mark.parametrize(("value", "code"), [(b"\x00junk", "bad_header"), (None, "undecodable")])
async def test_unreadable_bytes_are_dead_lettered(value: bytes | None, code: str) -> None:
    worker, publisher = FakeWorker([]), FakePublisher()
    await loop(worker, FakeCompactionJobs(), publisher).consume(record(value))
    (sent,) = publisher.sent
    dl = decode_dead_letter(sent.value)
    assert sent.topic == "dead" and dl.reason_code == code and dl.value == value
    assert worker.calls == 0


@pytest.mark.spec("R15.3")
async def test_an_expired_job_is_skipped_without_a_model_call() -> None:
    worker, publisher = FakeWorker([]), FakePublisher()
    jobs = FakeCompactionJobs(statuses={"cmp_1": "expired"})
    await loop(worker, jobs, publisher).consume(record(encode_compaction_request(REQ)))
    assert worker.calls == 0 and publisher.sent == []


@pytest.mark.spec("R15.3")
async def test_the_composed_service_turns_a_request_into_a_published_outcome() -> None:
    # Built like production (bootstrap.compose), over fakes: bytes in, outcome out.
    publisher = FakePublisher()
    jobs = FakeCompactionJobs(history(3))
    counter = CachedCounter(make_counter("cl100k_base"))
    requests = bootstrap.compose(SETTINGS, jobs, publisher, ScriptedSummarizer(["ok"]), counter)
    req = CompactionRequest(
        "cmp_2",
        "ses_1",
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
    await requests.consume(record(encode_compaction_request(req)))
    (out,) = publisher.on("records")
    outcome = decode_control(out.value).body
    assert isinstance(outcome, CompactionOutcome) and outcome.status == "succeeded"
    assert jobs.operations["cmp_2"].outcome == out.value


def test_transient_means_infrastructure_only() -> None:
    from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

    assert is_transient(asyncpg.ConnectionDoesNotExistError("x"))
    assert is_transient(asyncpg.CannotConnectNowError("x"))
    assert is_transient(ConnectionRefusedError()) and is_transient(TimeoutError())
    assert is_transient(KafkaConnectionError()) and is_transient(KafkaTimeoutError())
    assert not is_transient(KeyError("x")) and not is_transient(ValueError())
    assert not is_transient(asyncpg.UniqueViolationError("x"))
