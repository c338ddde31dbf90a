"""Bounded retention of prepared contexts (issue 13): every Prepare instance deletes the
rows older than ``ALC_PREPARED_RETENTION_H`` now and then. Several instances pruning at
once only delete the same old rows; a call for a pruned context is
``prepared_not_found`` (prepare again), one already checked is answered from its record."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import asyncpg

from storage.prepared_contexts import PreparedContexts

log = logging.getLogger(__name__)


async def prune_forever(stored: PreparedContexts, retention_s: float, every_s: float) -> None:
    while True:
        try:
            deleted = await stored.prune(retention_s)
            if deleted:
                log.info("pruned %d prepared contexts older than %.0f s", deleted, retention_s)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            # The next round tries again: retention is a bound, not a deadline.
            log.warning("pruning prepared contexts failed: %s", exc)
        await asyncio.sleep(every_s)


@contextlib.asynccontextmanager
async def pruning(stored: PreparedContexts, retention_s: float) -> AsyncIterator[None]:
    """Prune in the background while the service runs (every tenth of the retention, at
    most every ten minutes)."""
    task = asyncio.create_task(prune_forever(stored, retention_s, min(retention_s / 10, 600.0)))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
