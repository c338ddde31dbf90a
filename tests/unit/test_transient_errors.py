"""Which errors are infrastructure that comes back (retried with backoff) and which are a
record's or a request's own fault (dead-lettered or quarantined) — R15.3. The soak's
PostgreSQL restart broke a pooled connection mid-operation and the compaction service
exited on it; that error is transient for every consumer (one policy, streams/faults.py;
the full table is tests/unit/test_fault_policy.py)."""

from __future__ import annotations

import asyncpg
import pytest

from streams.faults import is_transient

BROKEN_POOL = asyncpg.InternalClientError("cannot switch to state 12; another operation")


@pytest.mark.spec("R15.3")
def test_a_connection_broken_by_a_restart_is_transient() -> None:
    assert is_transient(BROKEN_POOL)
    assert is_transient(ConnectionResetError())
    assert is_transient(asyncpg.exceptions.AdminShutdownError("terminating connection"))


@pytest.mark.spec("R15.3")
def test_a_bug_or_bad_data_is_not_transient() -> None:
    assert not is_transient(ValueError("bad value"))
    assert not is_transient(KeyError("missing"))
    assert not is_transient(asyncpg.exceptions.UniqueViolationError("duplicate key"))
