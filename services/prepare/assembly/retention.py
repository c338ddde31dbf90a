"""Bounded retention: every Prepare instance now and then deletes prepared
contexts older than ``ALC_PREPARED_RETENTION_H`` and render states not saved for
``ALC_RENDER_STATE_RETENTION_H``. Several instances pruning at once only delete the same
old rows. A call for a pruned context is ``prepared_not_found`` (prepare again), one
already checked is answered from its record; a view whose state was pruned renders in
full once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Protocol

import asyncpg

from schemas.errors import ContextError

log = logging.getLogger(__name__)


class Prunable(Protocol):
    async def prune(self, older_than_s: float, batch: int = 5000) -> int: ...


async def prune_forever(what: str, stored: Prunable, retention_s: float, every_s: float) -> None:
    while True:
        try:
            deleted = await stored.prune(retention_s)
            if deleted:
                log.info("pruned %d %s older than %.0f s", deleted, what, retention_s)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, ContextError) as exc:
            # the next round tries again: retention is a bound, not a deadline.
            log.warning("pruning %s failed: %s", what, exc)
        await asyncio.sleep(every_s)


@contextlib.asynccontextmanager
async def pruning(targets: dict[str, tuple[Prunable, float]]) -> AsyncIterator[None]:
    """Prune each of ``targets`` (name: store, retention in s) in the background while the
    service runs (every tenth of its retention, at most every ten minutes)."""
    tasks = [
        asyncio.create_task(prune_forever(what, stored, keep, min(keep / 10, 600.0)))
        for what, (stored, keep) in targets.items()
    ]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
