"""Composition root of the compaction service: the one place that reads settings and the
environment and wires adapters (PostgreSQL, Kafka, the summarizer, hooks) into the
worker and the request loop. ``compose`` takes the adapters as arguments, so unit tests
build the same service over fakes; ``start`` opens the real ones."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncpg
from aiokafka import AIOKafkaConsumer

from domain.compaction.gateway import SummaryGateway
from domain.context.tokens import CachedCounter
from domain.summarizer.wording import Wording
from schemas.settings import Settings
from services import metrics
from services.compaction.compact_hooks import HookChain
from services.compaction.consume import HandOver
from services.compaction.costs import CostNotes, ReleasePrices, catalog_profiles
from services.compaction.dispatch import Dispatcher
from services.compaction.extractive import ExtractiveSummarizer
from services.compaction.job_loop import LoopConfig, RequestLoop
from services.compaction.job_records import AgentRequests
from services.compaction.openai_compat import OpenAICompatibleSummarizer
from services.compaction.wording import SYSTEM_PROMPT, fork_instruction, render_segment
from services.compaction.worker import CompactionWorker, WorkerConfig
from services.hooks import load
from services.summarizers.anthropic_messages import ANTHROPIC_API, AnthropicMessagesSummarizer
from storage.calls.agent_contexts import PgAgentContexts
from storage.compaction.jobs import CompactionJobs, PgCompactionJobs
from storage.migrate import apply_dsn
from storage.pool import create_pool
from storage.roles import configured_dsn, dsn_of
from storage.tokenizers import make_counter
from streams.instance import claim_instance_id
from streams.kafka.auth import kafka_auth
from streams.kafka.bus_secrets import service_signer
from streams.kafka.publish import AiokafkaPublisher, Publisher
from streams.kafka.topics import require_topics

log = logging.getLogger("agentloom.compaction")


def make_gateway(settings: Settings, count: Callable[[str], int] | None = None) -> SummaryGateway:
    """The deployment's summarizer; ``count``: the tokenizer a model's answer is trimmed by."""
    if settings.summarizer == "openai":
        if not (settings.summarizer_base_url and settings.summarizer_model):
            raise SystemExit(
                "ALC_SUMMARIZER=openai needs ALC_SUMMARIZER_BASE_URL and ALC_SUMMARIZER_MODEL"
            )
        return OpenAICompatibleSummarizer(
            settings.summarizer_base_url,
            settings.summarizer_model,
            settings.summarizer_key(),
            settings.summarizer_timeout_s,
            count=count,
        )
    if settings.summarizer == "anthropic":
        key = settings.summarizer_key()
        if not (settings.summarizer_model and key):
            raise SystemExit(
                "ALC_SUMMARIZER=anthropic needs ALC_SUMMARIZER_MODEL and ALC_SUMMARIZER_API_KEY"
            )
        return AnthropicMessagesSummarizer(
            settings.summarizer_model,
            key,
            Wording(SYSTEM_PROMPT, render_segment, fork_instruction),
            base_url=settings.summarizer_base_url or ANTHROPIC_API,
            timeout_s=settings.summarizer_timeout_s,
            count=count,
        )
    return ExtractiveSummarizer()


def fork_format(gateway: SummaryGateway) -> str | None:
    """The provider format the summarizer client speaks (its ``fork_format``): a job
    continues the agent's request only when the agent's model is rendered in it. None:
    a summarizer that forks nothing (the built-in one, no model)."""
    fmt = getattr(gateway, "fork_format", None)
    return fmt if isinstance(fmt, str) else None


def load_hooks(spec: str) -> HookChain:
    """``module:factory`` entries; each factory returns a ``CompactHook``."""
    return HookChain(load(spec, "compaction"))


def worker_config(settings: Settings, crash_after_save: bool = False) -> WorkerConfig:
    extractive = settings.summarizer == "extractive"
    return WorkerConfig(
        settings.topic_records,
        # The built-in summarizer is no model call with an input limit: one segment of up
        # to ``compaction_rederive_tokens`` lets it rank the whole covered history at once
        # (the newest first), where segments would each keep their share of the bound.
        max(settings.compaction_segment_tokens, settings.compaction_rederive_tokens)
        if extractive
        else settings.compaction_segment_tokens,
        # A model's output is capped per call; the built-in summarizer fills its share of
        # the summary's bound instead (R11.2).
        None if extractive else settings.compaction_output_tokens,
        # One call may take the summarizer's own timeout plus its retries.
        settings.summarizer_timeout_s * 3,
        crash_after_save=crash_after_save,
        rederive_tokens=settings.compaction_rederive_tokens if extractive else 0,
        billed=not extractive,
    )


def loop_config(settings: Settings) -> LoopConfig:
    return LoopConfig(
        settings.topic_records,
        settings.topic_dead_letter,
        settings.compaction_max_worker_failures,
        settings.compaction_transient_retry_s,
    )


def build_worker(
    settings: Settings,
    jobs: CompactionJobs,
    publisher: Publisher,
    gateway: SummaryGateway,
    counter: CachedCounter,
    hooks: HookChain | None = None,
    crash_after_save: bool = False,
    costs: CostNotes | None = None,
    agents: AgentRequests | None = None,
) -> CompactionWorker:
    config = worker_config(settings, crash_after_save)
    return CompactionWorker(jobs, publisher, gateway, counter, config, hooks, costs, agents)


def compose(
    settings: Settings,
    jobs: CompactionJobs,
    publisher: Publisher,
    gateway: SummaryGateway,
    counter: CachedCounter,
    hooks: HookChain | None = None,
    crash_after_save: bool = False,
    costs: CostNotes | None = None,
    agents: AgentRequests | None = None,
) -> RequestLoop:
    """The request loop over its worker, wired to the given adapters."""
    worker = build_worker(
        settings, jobs, publisher, gateway, counter, hooks, crash_after_save, costs, agents
    )
    return RequestLoop(worker, jobs, publisher, loop_config(settings))


def instance_id(settings: Settings) -> str:
    """The group instance id: explicit (``ALC_COMPACTION_INSTANCE_ID``), or a slot on
    this host unique among the live compaction processes."""
    return claim_instance_id(
        "compaction", Path(settings.state_dir), settings.compaction_instance_id
    )


def _consumer(settings: Settings, listener: HandOver) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        **kafka_auth(settings, "compaction").client_kwargs(),
        group_id=settings.compaction_group,
        # Offsets are committed by hand, after the outcome is saved and published.
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        group_instance_id=instance_id(settings),
        session_timeout_ms=int(settings.processor_session_timeout_s * 1000),
        # A job may take minutes with a real model; don't get evicted meanwhile.
        max_poll_interval_ms=30 * 60 * 1000,
    )
    consumer.subscribe([settings.topic_compaction_requests], listener=listener)
    listener.consumer = consumer
    return consumer


@dataclass
class Running:
    """The started service: ``consume.consume_until(stop, consumer, jobs, group)``;
    ``close`` stops the consumer, the publisher and the pool, in that order."""

    consumer: AIOKafkaConsumer
    requests: RequestLoop
    jobs: Dispatcher
    close: Callable[[], Awaitable[None]]


async def start(settings: Settings) -> Running:
    await apply_dsn(configured_dsn(settings))
    # Requests in, records out: exit before joining if they are wrong.
    await require_topics(settings, "compaction")
    # A connection per concurrent job, and one for the loop's own reads.
    dsn = dsn_of(settings, "compaction")  # its own login (storage/roles.py)
    pool: asyncpg.Pool = await create_pool(
        dsn, 1, settings.compaction_concurrency + 1, plan_cache_mode=settings.pg_plan_cache_mode
    )
    # linger 0: a job's outcome is one message, sent and waited for on its own.
    # Outcomes on the records topic carry the compaction service's envelope.
    publisher = AiokafkaPublisher(
        settings.kafka_bootstrap,
        kafka_auth(settings, "compaction"),
        signer=service_signer(settings, "compaction"),
        linger_ms=0,
    )
    store = PgCompactionJobs(pool)
    counter = CachedCounter(make_counter("cl100k_base", settings.tiktoken_file))
    catalog = catalog_profiles(settings.model_profiles_file)
    gateway = make_gateway(settings, counter.count)
    # A model summarizer of the agent's model continues the agent's request (its cache),
    # in the format the summarizer speaks.
    fmt = fork_format(gateway)
    agents = AgentRequests(PgAgentContexts(pool), store, fmt, catalog) if fmt else None
    requests = compose(
        settings,
        store,
        publisher,
        gateway,
        counter,
        load_hooks(settings.compaction_hooks),
        crash_after_save=os.environ.get("ALC_FAULT_CRASH_AFTER_SAVE") == "1",
        # R18: the summarizer calls' usage and cost, under purpose "compaction".
        costs=CostNotes(
            publisher,
            settings.topic_observability,
            ReleasePrices(store, catalog),
        ),
        agents=agents,
    )
    jobs = Dispatcher(requests.consume, settings.compaction_concurrency)
    consumer = _consumer(settings, HandOver(jobs, settings.compaction_group))
    await publisher.start()
    await consumer.start()
    if settings.metrics_port is not None:
        metrics.serve(settings.metrics_port)

    async def close() -> None:
        await consumer.stop()
        await publisher.stop()
        await pool.close()

    return Running(consumer, requests, jobs, close)
