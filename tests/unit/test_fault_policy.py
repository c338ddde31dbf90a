"""One fault policy (streams/faults.py): every driver error we catch anywhere maps to one
of our types, and from that type one decision — retried or not, the HTTP status — made
the same way by every consumer (R15.3). A deadlock is the test case: retried by the
processor, by the compaction service (never counted toward quarantine) and a retriable
503 from Prepare."""

from __future__ import annotations

import inspect
import os
import socket
from typing import Any

import aiokafka.errors as kafka
import asyncpg
import pytest
from fastapi.testclient import TestClient

from schemas.errors import (
    BusRejected,
    BusUnavailable,
    ContextError,
    HookFailed,
    InvalidEvent,
    NotCommittedYet,
    StorageConflict,
    StorageRejected,
    StorageUnavailable,
    TransientError,
)
from schemas.wire import encode_compaction_request
from services.prepare.http.api import create_api
from streams.faults import (
    DRIVER_ERRORS,
    classify,
    describe_failure,
    http_answer,
    http_status,
    is_transient,
    retry_transient,
)
from tests.unit.fakes.compaction import FakeCompactionJobs
from tests.unit.fakes.publisher import FakePublisher
from tests.unit.test_compaction_loop import REQ, FakeWorker, loop, record
from tests.unit.test_processor_orchestration import events, make

pg = asyncpg.exceptions
DEADLOCK = pg.DeadlockDetectedError("deadlock detected")

# (error, our type (None: not ours, a bug), transient, HTTP status, HTTP code)
TABLE: list[tuple[BaseException, type[ContextError] | None, bool, int, str | None]] = [
    # PostgreSQL: a rolled-back transaction is a conflict a second attempt resolves
    (DEADLOCK, StorageConflict, True, 503, "storage_conflict"),
    (pg.SerializationError("could not serialize"), StorageConflict, True, 503, "storage_conflict"),
    # PostgreSQL: a lost connection, a server shutting down or out of resources
    (pg.ConnectionDoesNotExistError("x"), StorageUnavailable, True, 503, "storage_unavailable"),
    (pg.ConnectionFailureError("x"), StorageUnavailable, True, 503, "storage_unavailable"),
    (pg.CannotConnectNowError("starting up"), StorageUnavailable, True, 503, "storage_unavailable"),
    (pg.AdminShutdownError("terminating"), StorageUnavailable, True, 503, "storage_unavailable"),
    (pg.CrashShutdownError("crash"), StorageUnavailable, True, 503, "storage_unavailable"),
    (pg.TooManyConnectionsError("too many"), StorageUnavailable, True, 503, "storage_unavailable"),
    (pg.DiskFullError("disk full"), StorageUnavailable, True, 503, "storage_unavailable"),
    # PostgreSQL: a statement it refuses, a timeout it would hit again
    (pg.QueryCanceledError("statement timeout"), StorageRejected, False, 500, None),
    (pg.UniqueViolationError("duplicate key"), StorageRejected, False, 500, None),
    (pg.CheckViolationError("check"), StorageRejected, False, 500, None),
    (pg.UntranslatableCharacterError("\\u0000"), StorageRejected, False, 500, None),
    (pg.ProgramLimitExceededError("index row size"), StorageRejected, False, 500, None),
    (pg.InFailedSQLTransactionError("aborted"), StorageRejected, False, 500, None),
    # the client library
    (asyncpg.InterfaceError("connection is closed"), StorageUnavailable, True, 503, None),
    (asyncpg.InterfaceError("pool is closing"), StorageUnavailable, True, 503, None),
    (asyncpg.InterfaceError("another operation is in progress"), StorageRejected, False, 500, None),
    (asyncpg.InternalClientError("cannot switch to state 12"), StorageUnavailable, True, 503, None),
    (pg.ProtocolError("unexpected message"), StorageUnavailable, True, 503, None),
    # the broker
    (kafka.KafkaConnectionError(), BusUnavailable, True, 503, "bus_unavailable"),
    (kafka.KafkaTimeoutError(), BusUnavailable, True, 503, "bus_unavailable"),
    (kafka.RequestTimedOutError(), BusUnavailable, True, 503, "bus_unavailable"),
    (kafka.NotLeaderForPartitionError(), BusUnavailable, True, 503, "bus_unavailable"),
    (kafka.UnknownTopicOrPartitionError(), BusUnavailable, True, 503, "bus_unavailable"),
    (kafka.NodeNotReadyError(), BusUnavailable, True, 503, "bus_unavailable"),
    (kafka.BrokerNotAvailableError(), BusUnavailable, True, 503, "bus_unavailable"),
    (kafka.KafkaUnavailableError(), BusUnavailable, True, 503, "bus_unavailable"),
    (kafka.MessageSizeTooLargeError(), BusRejected, False, 500, None),
    (kafka.TopicAuthorizationFailedError(), BusRejected, False, 500, None),
    (kafka.ProducerClosed(), BusRejected, False, 500, None),
    (kafka.CommitFailedError(), BusRejected, False, 500, None),
    (kafka.IllegalStateError(), BusRejected, False, 500, None),
    (kafka.KafkaError(), BusRejected, False, 500, None),
    # the socket (either driver's)
    (ConnectionRefusedError(), StorageUnavailable, True, 503, "storage_unavailable"),
    (ConnectionResetError(), StorageUnavailable, True, 503, "storage_unavailable"),
    (BrokenPipeError(), StorageUnavailable, True, 503, "storage_unavailable"),
    (TimeoutError(), StorageUnavailable, True, 503, "storage_unavailable"),
    (socket.gaierror(-2, "Name or service not known"), StorageUnavailable, True, 503, None),
    (OSError("Multiple exceptions: [Errno 111]"), StorageUnavailable, True, 503, None),
    (FileNotFoundError("x"), None, False, 500, None),
    (PermissionError("x"), None, False, 500, None),
    # ours, as they are: transient only for infrastructure, whatever ``retriable`` says
    (StorageUnavailable("x"), StorageUnavailable, True, 503, "storage_unavailable"),
    (NotCommittedYet("x"), NotCommittedYet, False, 503, "not_committed_yet"),
    (HookFailed("x"), HookFailed, False, 502, "hook_failed"),
    (InvalidEvent("x"), InvalidEvent, False, 400, "invalid_event"),
    (StorageRejected("x", sqlstate="23505"), StorageRejected, False, 500, None),
    # a bug
    (ValueError("x"), None, False, 500, None),
    (KeyError("x"), None, False, 500, None),
]


@pytest.mark.spec("R15.3")
@pytest.mark.parametrize(
    ("exc", "ours", "transient", "status", "code"),
    TABLE,
    ids=[f"{type(row[0]).__name__}-{i}" for i, row in enumerate(TABLE)],
)
def test_every_driver_error_we_catch_has_one_classification(
    exc: BaseException, ours: type[ContextError] | None, transient: bool, status: int, code: str
) -> None:
    got = classify(exc)
    assert (type(got) if got is not None else None) is ours
    assert is_transient(exc) is transient
    assert http_status(exc) == status
    answer = http_answer(exc)
    assert (answer is None) is (status == 500)
    if answer is not None:
        if not isinstance(exc, ContextError):  # translated: retriable exactly when transient
            assert answer.retriable is transient
        if code is not None:
            assert answer.code == code


def _subclasses(base: type[BaseException], module: Any) -> list[type[BaseException]]:
    return [c for _, c in inspect.getmembers(module, inspect.isclass) if issubclass(c, base)]


@pytest.mark.spec("R15.3")
def test_every_postgres_error_class_is_transient_exactly_for_its_families() -> None:
    families = (
        pg.TransactionRollbackError,
        pg.PostgresConnectionError,
        pg.OperatorInterventionError,
        pg.InsufficientResourcesError,
    )
    classes = _subclasses(asyncpg.PostgresError, pg)
    assert len(classes) > 200  # all of asyncpg's SQLSTATE classes
    for cls in classes:
        exc = cls("x")
        expected = issubclass(cls, families) and not issubclass(cls, pg.QueryCanceledError)
        assert is_transient(exc) is expected, cls
        assert isinstance(classify(exc), TransientError if expected else StorageRejected), cls


@pytest.mark.spec("R15.3")
def test_every_kafka_error_class_is_transient_when_retriable_or_unreachable() -> None:
    unreachable = (
        kafka.KafkaConnectionError,
        kafka.KafkaTimeoutError,
        kafka.BrokerNotAvailableError,
        kafka.KafkaUnavailableError,
    )
    for cls in _subclasses(kafka.KafkaError, kafka):
        exc = cls()
        expected = bool(cls.retriable) or issubclass(cls, unreachable)
        assert is_transient(exc) is expected, cls
        assert isinstance(classify(exc), BusUnavailable if expected else BusRejected), cls


def test_the_http_layer_handles_every_driver_error_class_the_policy_classifies() -> None:
    assert set(DRIVER_ERRORS) == {
        asyncpg.PostgresError,
        asyncpg.InterfaceError,
        asyncpg.InternalClientError,
        kafka.KafkaError,
        OSError,
    }
    for exc, ours, *_ in TABLE:
        if ours is not None and not isinstance(exc, ContextError):
            assert isinstance(exc, DRIVER_ERRORS), exc


def test_a_dead_letter_names_the_refusal_and_its_sqlstate_translated_or_not() -> None:
    raw = pg.UniqueViolationError("duplicate key value")
    code, reason = describe_failure(raw)
    assert code == "storage_rejected"
    assert reason == "UniqueViolationError (SQLSTATE 23505): duplicate key value"
    translated = classify(raw)
    assert isinstance(translated, StorageRejected)
    try:
        raise translated from raw  # as storage.pool's connections raise it
    except StorageRejected as exc:
        assert describe_failure(exc) == (code, reason)
    assert describe_failure(KeyError("k")) == ("apply_failed", "KeyError: 'k'")


# --- a deadlock, in every consumer -----------------------------------------------------


@pytest.mark.spec("R15.3")
async def test_the_processor_retries_a_deadlock_and_dead_letters_nothing() -> None:
    proc, store = make()
    real = store.write_records
    failures = [DEADLOCK]

    async def deadlock_once(*args: Any, **kw: Any) -> Any:
        if failures:
            raise failures.pop()
        return await real(*args, **kw)

    store.write_records = deadlock_once  # type: ignore[method-assign]
    msgs = events("a", "b")
    # The batch fails as a whole (not bisected into a record's fault) ...
    with pytest.raises(pg.DeadlockDetectedError):
        await proc.handle(msgs)
    assert store.committed_keys() == []
    # ... and the retry applies it, nothing isolated.
    failures.append(DEADLOCK)
    result = await retry_transient(lambda: proc.handle(msgs), 5.0)
    assert (result.committed, result.isolated, result.dead_letters) == (2, 0, 0)
    assert store.committed_keys() == ["a", "b"]
    assert failures == []


@pytest.mark.spec("R15.3")
async def test_the_compaction_loop_retries_a_deadlock_without_counting_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def exit_(code: int) -> None:  # the loop exits when retries do not help: fail instead
        raise AssertionError(f"the loop exited ({code})")

    monkeypatch.setattr(os, "_exit", exit_)
    # Three failures quarantine (the loop's max_failures is 3): the two deadlocks must
    # not be counted, or the request would be quarantined on its fourth call.
    worker = FakeWorker([DEADLOCK, KeyError("a"), KeyError("b"), DEADLOCK])
    publisher = FakePublisher()
    jobs = FakeCompactionJobs(fail_next=[DEADLOCK])  # reading the job's status, once
    await loop(worker, jobs, publisher).consume(record(encode_compaction_request(REQ)))
    assert worker.calls == 5 and publisher.sent == []  # succeeded on the 5th call


class _Broken:
    """A Prepare service whose every use case raises ``exc`` on every call."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __getattr__(self, name: str) -> Any:
        return self

    async def __call__(self, *_: Any, **__: Any) -> Any:
        raise self.exc


def _answer(exc: BaseException) -> tuple[int, dict[str, Any]]:
    app = create_api(_Broken(exc))  # type: ignore[arg-type]
    with TestClient(app, raise_server_exceptions=False) as http:
        r = http.get("/v1/sessions/s1", headers={"Authorization": "Bearer k"})
    return r.status_code, r.json()["error"]


@pytest.mark.spec("R15.3")
@pytest.mark.parametrize("exc", [DEADLOCK, StorageConflict("deadlock detected")])
def test_prepare_answers_a_deadlock_with_a_retriable_503(exc: BaseException) -> None:
    # Raw (a connection the pool did not open) or translated (storage.pool's): one answer.
    status, err = _answer(exc)
    assert (status, err["code"], err["retriable"]) == (503, "storage_conflict", True)


@pytest.mark.spec("R15.3")
@pytest.mark.parametrize(
    "exc", [pg.UniqueViolationError("dup"), StorageRejected("dup", sqlstate="23505")]
)
def test_prepare_answers_a_refusal_of_the_database_as_a_logged_internal_error(
    exc: BaseException,
) -> None:
    status, err = _answer(exc)
    assert (status, err["code"], err["retriable"]) == (500, "internal_error", False)
    assert len(err["details"]["error_id"]) == 12
