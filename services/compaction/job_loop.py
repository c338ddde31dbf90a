"""One compaction request, from its bytes to its published outcome, so that no request
stalls its partition (R15.3). An unreadable request is dead-lettered; one that keeps
making the worker raise is quarantined; transient infrastructure errors (as
``streams.faults`` classifies them: a deadlock too) are retried, never counted, and if
they outlive their retries the process exits uncommitted (the request is redelivered
after the restart). Requests run concurrently (``dispatch``, ``consume``)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from aiokafka import ConsumerRecord

from schemas.errors import InvalidEvent
from schemas.wire import (
    CompactionOutcome,
    CompactionRequest,
    DeadLetter,
    decode_compaction_request,
    encode_dead_letter,
    fit_dead_letter,
)
from services import metrics
from services.compaction.outcomes import outcome_event
from storage.compaction.jobs import CompactionJobs, SavedOperation
from streams.faults import is_transient, retry_transient
from streams.kafka.publish import Publisher

log = logging.getLogger("agentloom.compaction")
_T = TypeVar("_T")


class JobHandler(Protocol):
    """What the loop needs of the worker (``CompactionWorker``)."""

    async def handle(self, req: CompactionRequest) -> CompactionOutcome: ...


@dataclass(frozen=True)
class LoopConfig:
    topic_records: str
    topic_dead_letter: str
    max_failures: int
    transient_retry_s: float


class RequestLoop:
    """Handles a request so that one that keeps failing never stalls its partition
    (R15.3): an unreadable request is dead-lettered; one that makes the worker raise
    ``max_failures`` times is quarantined — dead-lettered with its reason and its job
    failed, so the processor lets the session go on with its baseline unmoved."""

    def __init__(
        self,
        worker: JobHandler,
        jobs: CompactionJobs,
        publisher: Publisher,
        config: LoopConfig,
    ) -> None:
        self.worker = worker
        self.jobs = jobs
        self.publisher = publisher
        self.config = config

    async def _retry(self, fn: Callable[[], Awaitable[_T]]) -> _T:
        return await retry_transient(fn, self.config.transient_retry_s)

    async def consume(self, m: ConsumerRecord[bytes, bytes]) -> None:
        try:
            req = decode_compaction_request(m.value)  # type: ignore[arg-type]
        except Exception as exc:  # bad bytes: InvalidEvent, or None/garbage a decoder rejects
            code = exc.reason_code if isinstance(exc, InvalidEvent) else "undecodable"
            await self._dead_letter(m, code, f"unreadable compaction request: {exc}", None, None)
            return
        try:
            status = await self._retry(lambda: self.jobs.job_status(req.job_id))
            if status == "expired":
                # Past its deadline the processor gave up on this job (and may have
                # started another): its outcome would be ignored, so spend no model call.
                log.info("job %s expired before it was handled: skipped", req.job_id)
                metrics.COMPACTION_JOBS.labels("expired").inc()
                return
            with metrics.COMPACTION_JOB_SECONDS.time():
                await self._handle(m, req)
        except Exception:
            # A transient error that outlived its retries, or a quarantine that could not
            # be written: exit uncommitted, the request is redelivered after restart.
            log.critical("infrastructure still failing: exiting", exc_info=True)
            logging.shutdown()
            os._exit(70)

    async def _handle(self, m: ConsumerRecord[bytes, bytes], req: CompactionRequest) -> None:
        """The worker's attempts: transient errors retried, anything else counted; the
        ``max_failures``-th quarantines the request. Raises what outlived its retries."""
        failures = 0
        while True:
            try:
                await self._retry(lambda: self.worker.handle(req))
                return
            except Exception as exc:
                if is_transient(exc):
                    raise
                failures += 1
                log.exception(
                    "job %s raised (%d/%d)", req.job_id, failures, self.config.max_failures
                )
                if failures >= self.config.max_failures:
                    await self._quarantine(m, req, failures, exc)
                    metrics.COMPACTION_JOBS.labels("quarantined").inc()
                    return
                await asyncio.sleep(0.5 * failures)

    async def _quarantine(
        self, m: ConsumerRecord[bytes, bytes], req: CompactionRequest, n: int, exc: Exception
    ) -> None:
        reason = f"worker raised {n} times: {type(exc).__name__}: {exc}"[:1000]
        outcome = CompactionOutcome(
            req.job_id,
            "failed",
            "worker",
            f"quarantined:{type(exc).__name__}",
            parent_summary_id=req.parent_summary_id,
        )
        data = outcome_event(req, outcome)
        # Saved like any outcome: a redelivery republishes it instead of failing again.
        op = SavedOperation(req.job_id, "failed", "worker", data, None, 0, reason)
        await self._retry(lambda: self.jobs.save_outcome(op))
        await self._dead_letter(m, "compaction_worker_failed", reason, req.session_id, req.job_id)
        # The processor marks the job failed from this outcome: baseline unmoved (R8.4).
        await self._retry(
            lambda: self.publisher.send_and_wait(
                self.config.topic_records, req.session_id.encode(), data
            )
        )
        log.error("job %s quarantined: %s", req.job_id, reason)

    async def _dead_letter(
        self,
        m: ConsumerRecord[bytes, bytes],
        code: str,
        reason: str,
        session_id: str | None,
        job_id: str | None,
    ) -> None:
        dl = DeadLetter(
            reason_code=code,
            reason=reason,
            source_topic=m.topic,
            source_partition=m.partition,
            source_offset=m.offset,
            key=m.key,
            value=m.value,
            session_id=session_id,
            event_key=job_id,
            failed_at_ms=int(time.time() * 1000),
        )
        dl = fit_dead_letter(dl)  # a ~1 MB request must not make the letter unsendable
        await self._retry(
            lambda: self.publisher.send_and_wait(
                self.config.topic_dead_letter, dl.key, encode_dead_letter(dl)
            )
        )
        metrics.DEAD_LETTERS.labels(code).inc()
        log.warning("dead letter %s at %s:%d: %s", code, m.topic, m.offset, reason)
