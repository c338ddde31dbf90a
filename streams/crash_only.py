"""Crash-only batch handling: a batch is handled, or the process ends before anything
more can be acknowledged.

``BatchProcessor.handle`` isolates and dead-letters whatever record it cannot apply, so a
failure that reaches the drivers is infrastructure. It is retried within a bound; past it
the process exits with ``CRASH_EXIT_CODE`` and the batch is redelivered after the restart
(redelivery is a no-op for whatever did commit).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import NoReturn

from streams.admission import Admitted, RawMessage
from streams.faults import is_transient, retry_transient
from streams.processor import BatchProcessor, BatchResult

log = logging.getLogger("agentloom.processor")

CRASH_EXIT_CODE = 70


async def handle_or_exit(
    proc: BatchProcessor,
    batch: list[RawMessage],
    transient_retry_s: float = 300.0,
    attempts: int = 3,
    ahead: Admitted | None = None,
) -> BatchResult:
    """Handle a batch; exit the process at once when the infrastructure stays lost.

    ``handle`` isolates and dead-letters whatever record it cannot apply, so what
    reaches here is infrastructure: a transient failure (connection loss, serialization
    failure, deadlock) is retried with backoff for ``transient_retry_s``; anything else
    — a defect outside record isolation — is tried ``attempts`` times.

    Exiting (rather than raising) is deliberate: faust's ``take_events`` acks a batch in a
    ``finally`` even when the loop body raises, so an exception could let its offsets be
    committed. A dead process commits nothing; the batch is redelivered after restart,
    and redelivery is a no-op for whatever did commit.
    """
    for attempt in range(1, attempts + 1):
        try:
            result = await retry_transient(lambda: proc.handle(batch, ahead), transient_retry_s)
            # A routine batch (tens a second under load) at DEBUG; one that refused,
            # dead-lettered or isolated anything at INFO.
            notable = result.dead_letters or result.rejected or result.isolated
            log.log(
                logging.INFO if notable else logging.DEBUG,
                "batch of %d: committed=%d duplicates=%d dead_letters=%d rejected=%d isolated=%d",
                len(batch),
                result.committed,
                result.duplicates,
                result.dead_letters,
                result.rejected,
                result.isolated,
            )
            return result
        except Exception as exc:
            if is_transient(exc):
                log.critical("infrastructure lost for %.0fs", transient_retry_s, exc_info=True)
                break
            log.exception("batch of %d failed (attempt %d/%d)", len(batch), attempt, attempts)
            await asyncio.sleep(0.5 * attempt)
    exit_for_redelivery("giving up on batch: exiting so that it is redelivered after restart")


def exit_for_redelivery(why: str) -> NoReturn:
    """End the process at once, before anything more can be acked (crash-only): what was
    not acknowledged is redelivered after the restart, and redelivery is a no-op."""
    log.critical(why, exc_info=sys.exc_info()[0] is not None)
    logging.shutdown()
    os._exit(CRASH_EXIT_CODE)
