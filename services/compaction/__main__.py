"""Entry point: ``agentloom-compaction`` (or ``python -m services.compaction``).

Its own consumer group on ``ctx.compaction.requests``: jobs are handled one at a time per
partition and the offset is committed only after the outcome was saved and published, so
a crash re-runs the job — which then finds its saved candidate (R15.3). No request stalls
its partition: unreadable ones are dead-lettered, and one that keeps making the worker
raise is quarantined (``RequestLoop``); transient infrastructure errors are retried.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord
from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from tenacity import (
    AsyncRetrying,
    before_sleep_log,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
)

from domain.tokens import CachedCounter, make_counter
from schemas.errors import InvalidEvent
from schemas.settings import Settings
from schemas.wire import (
    CompactionOutcome,
    CompactionRequest,
    ControlEvent,
    DeadLetter,
    decode_compaction_request,
    encode_control,
    encode_dead_letter,
    fit_dead_letter,
)
from services.compaction.compact_hooks import HookChain
from services.compaction.extractive import ExtractiveSummarizer
from services.compaction.gateway import SummaryGateway
from services.compaction.openai_compat import OpenAICompatibleSummarizer
from services.compaction.worker import CompactionWorker, WorkerConfig
from storage.migrate import apply_dsn
from storage.pool import create_pool
from streams.topics import require_topics

log = logging.getLogger("agentloom.compaction")
_T = TypeVar("_T")


def make_gateway(settings: Settings) -> SummaryGateway:
    if settings.summarizer == "openai":
        if not (settings.summarizer_base_url and settings.summarizer_model):
            raise SystemExit(
                "ALC_SUMMARIZER=openai needs ALC_SUMMARIZER_BASE_URL and ALC_SUMMARIZER_MODEL"
            )
        return OpenAICompatibleSummarizer(
            settings.summarizer_base_url,
            settings.summarizer_model,
            settings.summarizer_api_key,
            settings.summarizer_timeout_s,
        )
    return ExtractiveSummarizer()


def load_hooks(spec: str) -> HookChain:
    """``module:factory`` entries; each factory returns a ``CompactHook``."""
    hooks = []
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        module, _, attr = entry.partition(":")
        hook = getattr(importlib.import_module(module), attr)()
        log.info("compact hook %s@%s loaded from %s", hook.name, hook.version, entry)
        hooks.append(hook)
    return HookChain(tuple(hooks))


async def run(settings: Settings) -> None:
    await apply_dsn(settings.pg_dsn)
    await require_topics(settings)  # requests in, records out: exit before joining if wrong
    pool = await create_pool(settings.pg_dsn, 1, 4)
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap, acks="all", enable_idempotence=True
    )
    consumer = AIOKafkaConsumer(
        settings.topic_compaction_requests,
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=settings.compaction_group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=16,
        group_instance_id=f"{settings.compaction_group}-{settings.processor_instance_id}",
        session_timeout_ms=int(settings.processor_session_timeout_s * 1000),
        # A job may take minutes with a real model; don't get evicted meanwhile.
        max_poll_interval_ms=30 * 60 * 1000,
    )
    await producer.start()
    await consumer.start()
    worker = CompactionWorker(
        pool,
        producer,
        make_gateway(settings),
        CachedCounter(make_counter("cl100k_base", settings.tiktoken_file)),
        WorkerConfig(
            settings.topic_records,
            settings.compaction_segment_tokens,
            settings.compaction_output_tokens,
            settings.summarizer_timeout_s * 3,
            crash_after_save=os.environ.get("ALC_FAULT_CRASH_AFTER_SAVE") == "1",
        ),
        load_hooks(settings.compaction_hooks),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    requests = RequestLoop(
        worker,
        pool,
        producer,
        LoopConfig(
            settings.topic_records,
            settings.topic_dead_letter,
            settings.compaction_max_worker_failures,
            settings.compaction_transient_retry_s,
        ),
    )
    log.info("[compaction]: Ready, consuming %s", settings.topic_compaction_requests)
    try:
        while not stop.is_set():
            fetched = await consumer.getmany(timeout_ms=200)
            for tp, msgs in fetched.items():
                for m in msgs:
                    await requests.consume(m)
                # After every request of the batch has its outcome published (or was
                # dead-lettered): a crash before this line redelivers, and redelivery
                # republishes saved outcomes instead of working again.
                await consumer.commit({tp: msgs[-1].offset + 1})
    finally:
        await consumer.stop()
        await producer.stop()
        await pool.close()


@dataclass(frozen=True)
class LoopConfig:
    topic_records: str
    topic_dead_letter: str
    max_failures: int
    transient_retry_s: float


def transient(exc: BaseException) -> bool:
    """Infrastructure that will come back (database or broker connection loss, timeouts):
    retried with backoff, never counted against the request."""
    if isinstance(exc, KafkaError):
        return bool(exc.retriable) or isinstance(exc, KafkaConnectionError | KafkaTimeoutError)
    return isinstance(
        exc,
        ConnectionError  # refused, reset, broken pipe
        | socket.gaierror
        | TimeoutError
        | asyncpg.PostgresConnectionError
        | asyncpg.exceptions.OperatorInterventionError
        | asyncpg.TooManyConnectionsError
        # A pooled connection broken mid-operation by a server restart ("cannot switch
        # to state ..."): the soak's PostgreSQL restart made the service exit on it.
        | asyncpg.InternalClientError,
    )


class RequestLoop:
    """One request at a time, so that a request that keeps failing never stalls its
    partition (R15.3): an unreadable request is dead-lettered; one that makes the worker
    raise ``max_failures`` times is quarantined — dead-lettered with its reason and its job
    failed, so the processor lets the session go on with its baseline unmoved."""

    def __init__(
        self,
        worker: CompactionWorker,
        pool: asyncpg.Pool,
        producer: AIOKafkaProducer,
        config: LoopConfig,
    ) -> None:
        self.worker = worker
        self.pool = pool
        self.producer = producer
        self.config = config

    async def _retry(self, fn: Callable[[], Awaitable[_T]]) -> _T:
        retrying = AsyncRetrying(
            retry=retry_if_exception(transient),
            wait=wait_exponential(multiplier=0.2, max=10),
            stop=stop_after_delay(self.config.transient_retry_s),
            before_sleep=before_sleep_log(log, logging.WARNING),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await fn()
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def consume(self, m: ConsumerRecord[bytes, bytes]) -> None:
        try:
            req = decode_compaction_request(m.value)  # type: ignore[arg-type]
        except Exception as exc:  # bad bytes: InvalidEvent, or None/garbage a decoder rejects
            code = exc.reason_code if isinstance(exc, InvalidEvent) else "undecodable"
            await self._dead_letter(m, code, f"unreadable compaction request: {exc}", None, None)
            return
        try:
            status = await self._retry(
                lambda: self.pool.fetchval(
                    "SELECT status FROM compaction_jobs WHERE job_id=$1", req.job_id
                )
            )
            if status == "expired":
                # Past its deadline the processor gave up on this job (and may have
                # started another): its outcome would be ignored, so spend no model call.
                log.info("job %s expired before it was handled: skipped", req.job_id)
                return
            failures = 0
            while True:
                try:
                    await self._retry(lambda: self.worker.handle(req))
                    return
                except Exception as exc:
                    if transient(exc):
                        raise
                    failures += 1
                    log.exception(
                        "job %s raised (%d/%d)", req.job_id, failures, self.config.max_failures
                    )
                    if failures >= self.config.max_failures:
                        await self._quarantine(m, req, failures, exc)
                        return
                    await asyncio.sleep(0.5 * failures)
        except Exception:
            # A transient error that outlived its retries, or a quarantine that could not
            # be written: exit uncommitted, the request is redelivered after restart.
            log.critical("infrastructure still failing: exiting", exc_info=True)
            logging.shutdown()
            os._exit(70)

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
        data = encode_control(
            ControlEvent(
                f"outcome:{req.job_id}",
                req.session_id,
                req.run_id,
                req.instance_id,
                int(time.time() * 1000),
                outcome,
            )
        )
        # Saved like any outcome: a redelivery republishes it instead of failing again.
        await self._retry(
            lambda: self.pool.execute(
                "INSERT INTO compaction_operations (job_id, status, stage, outcome,"
                " model_calls, error) VALUES ($1, 'failed', 'worker', $2, 0, $3)"
                " ON CONFLICT (job_id) DO NOTHING",
                req.job_id,
                data,
                reason,
            )
        )
        await self._dead_letter(m, "compaction_worker_failed", reason, req.session_id, req.job_id)
        # The processor marks the job failed from this outcome: baseline unmoved (R8.4).
        await self._retry(
            lambda: self.producer.send_and_wait(
                self.config.topic_records, data, key=req.session_id.encode()
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
            lambda: self.producer.send_and_wait(
                self.config.topic_dead_letter, encode_dead_letter(dl), key=dl.key
            )
        )
        log.warning("dead letter %s at %s:%d: %s", code, m.topic, m.offset, reason)


def main() -> None:
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    asyncio.run(run(settings))


if __name__ == "__main__":
    main()
