"""Which errors are infrastructure that comes back (retried with backoff) and which are a
record's or a request's own fault (dead-lettered or quarantined) — R15.3. The soak's
PostgreSQL restart broke a pooled connection mid-operation and the compaction service
exited on it; that error is transient in both consumers."""

from __future__ import annotations

import asyncpg
import pytest

from services.compaction.requests import transient
from streams.faults import is_transient

BROKEN_POOL = asyncpg.InternalClientError("cannot switch to state 12; another operation")


@pytest.mark.spec("R15.3")
@pytest.mark.parametrize("classify", [transient, is_transient])
def test_a_connection_broken_by_a_restart_is_transient(classify: object) -> None:
    assert callable(classify)
    assert classify(BROKEN_POOL)
    assert classify(ConnectionResetError())
    assert classify(asyncpg.exceptions.AdminShutdownError("terminating connection"))


@pytest.mark.spec("R15.3")
@pytest.mark.parametrize("classify", [transient, is_transient])
def test_a_bug_or_bad_data_is_not_transient(classify: object) -> None:
    assert callable(classify)
    assert not classify(ValueError("bad value"))
    assert not classify(KeyError("missing"))
    assert not classify(asyncpg.exceptions.UniqueViolationError("duplicate key"))
