"""Stored render states (issue 13: cold prepare), one contract run against PostgreSQL and
the in-memory adapter: a newer state of the same fingerprint replaces an older one, an
older never replaces a newer, another fingerprint replaces it outright, and a state is
only found under its own fingerprint (a new summary or revocation is never served from
an earlier state, R11.8/R15.3)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from storage.calls.render_states import (
    MemoryRenderStates,
    PgRenderStates,
    RenderStates,
    StoredState,
)
from storage.migrate import apply_dsn
from storage.pool import create_pool


@pytest.fixture(params=["postgres", "memory"])
async def states(request: pytest.FixtureRequest, pg_dsn: str) -> AsyncIterator[RenderStates]:
    if request.param == "memory":
        yield MemoryRenderStates()
        return
    await apply_dsn(pg_dsn)
    pool = await create_pool(pg_dsn, 1, 2)
    try:
        yield PgRenderStates(pool)
    finally:
        await pool.close()


@pytest.mark.spec("R15.3")
async def test_render_state_replacement_rules(
    states: RenderStates, request: pytest.FixtureRequest
) -> None:
    key = (f"s-{request.node.callspec.id}", "run1", "inst1")
    assert await states.load(*key, "fp1") is None
    await states.save(*key, "fp1", StoredState(10, b"\x00ten"))
    assert await states.load(*key, "fp1") == StoredState(10, b"\x00ten")
    await states.save(*key, "fp1", StoredState(7, b"seven"))  # older: kept out
    assert await states.load(*key, "fp1") == StoredState(10, b"\x00ten")
    await states.save(*key, "fp1", StoredState(12, b"twelve"))
    assert await states.load(*key, "fp1") == StoredState(12, b"twelve")
    await states.save(*key, "fp2", StoredState(3, b"three"))  # a new summary: replaces
    assert await states.load(*key, "fp1") is None
    assert await states.load(*key, "fp2") == StoredState(3, b"three")
    assert await states.load(key[0], "run1", "other", "fp2") is None  # per thread
