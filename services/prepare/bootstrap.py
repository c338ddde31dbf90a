"""Composition root of the Prepare process: the use cases wired once, over real adapters
(``running_service``) or over any others that keep the same ports (unit tests' fakes,
through ``build_service`` as well)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass, field, replace
from functools import partial

import asyncpg

from domain.context.tokens import CachedCounter
from domain.policy.sections import COMPACT_POINTS, at_point
from domain.window.model_catalog import ModelCatalog
from schemas.errors import NotFound
from schemas.settings import Settings
from services.model_profiles import load_catalog
from services.prepare.access import Access, KeyLookup
from services.prepare.assembly.compaction_check import CompactionCheck
from services.prepare.assembly.prepare_context import Preparer
from services.prepare.assembly.prepare_hooks import (
    METHODS,
    HookRegistry,
    hook_ids,
    hook_source,
    load_hooks,
)
from services.prepare.assembly.prepared import PreparedStore
from services.prepare.assembly.retention import Prunable, pruning
from services.prepare.assembly.views import ThreadViews, built_to_keep
from services.prepare.assembly.waiter import CommitWaiter, Waiter
from services.prepare.calibration import CalibrationCache
from services.prepare.content import ContentStore
from services.prepare.model_gateway import Gateway
from services.prepare.notes import Notes
from services.prepare.publishing import ReleaseBook
from services.prepare.readback import ReadBack
from services.prepare.run_lifecycle import Runs
from services.prepare.service import PrepareService
from storage.api_keys import find_key
from storage.blobs import Blobs, PgBlobs, PgRecords, Records
from storage.calibration import Calibrations, PgCalibrations
from storage.calls.model_calls import ModelCalls, PgModelCalls
from storage.calls.prepared_contexts import PgPreparedContexts, PreparedContexts
from storage.calls.render_states import PgRenderStates, RenderStates
from storage.calls.views import PgCallViews
from storage.compaction.read_ahead import PgReadAheads, ReadAheads
from storage.compaction.view import CompactionReads, PgCompactionReads
from storage.migrate import apply_dsn
from storage.pool import create_pool
from storage.records.frontier import FrontierReads, NoFrontier, PgFrontier
from storage.records.thread_frontier import PgThreadFrontier, ThreadFrontierReads
from storage.records.threads import PgThreads, Threads
from storage.releases import PgReleases, Releases
from storage.roles import configured_dsn, dsn_of
from storage.sessions import PgSessions, Sessions
from storage.tokenizers import make_counter
from streams import tracing
from streams.kafka.auth import kafka_auth
from streams.kafka.bus_secrets import service_signer
from streams.kafka.publish import AiokafkaPublisher, Publisher
from streams.kafka.topics import ensure_topics


@dataclass(frozen=True)
class Adapters:
    """Everything Prepare does I/O through: its ports."""

    releases: Releases
    sessions: Sessions
    model_calls: ModelCalls
    blobs: Blobs
    records: Records
    compaction: CompactionReads
    threads: Threads
    find_key: KeyLookup
    publisher: Publisher
    waiter: Waiter
    prepared: PreparedContexts  # every instance's prepared contexts
    calibrations: Calibrations  # every instance's usage reports, per model (R6.4)
    pool: asyncpg.Pool | None = None  # the analytics query's
    render_states: RenderStates | None = None  # thread render states (cold prepare)
    frontier: FrontierReads | None = None  # plan, constraints; None: none
    # a thread's new records and its frontier in one read (None: each apart)
    thread_frontier: ThreadFrontierReads | None = None
    # with the main view's compaction row too, before the prepare decides (None: apart)
    read_aheads: ReadAheads | None = None
    notes: Publisher | None = None  # the observability notes' (None: ``publisher``)


@dataclass(frozen=True)
class Options:
    topic_records: str = "ctx.records"
    topic_observability: str | None = None
    commit_wait_s: float = 10.0
    compaction_wait_s: float = 20.0
    host_id: str = "prepare"
    key_cache_s: float = 10.0
    prepared_capacity: int = 256  # the in-process cache; all are in PostgreSQL
    prepared_retention_s: float = 24 * 3600.0
    render_state_retention_s: float = 72 * 3600.0
    call_view_retention_s: float = 30 * 24 * 3600.0
    calibration_ttl_s: float = 5.0
    # R17: the named profiles and platform limits policies reference (release_spec).
    models: ModelCatalog = field(default_factory=ModelCatalog)

    @classmethod
    def from_settings(cls, settings: Settings, counting_method: str | None = None) -> Options:
        return cls(
            topic_records=settings.topic_records,
            topic_observability=settings.topic_observability,
            commit_wait_s=settings.prepare_commit_wait_s,
            compaction_wait_s=settings.compaction_wait_s,
            prepared_retention_s=settings.prepared_retention_h * 3600.0,
            render_state_retention_s=settings.render_state_retention_h * 3600.0,
            call_view_retention_s=settings.call_view_retention_h * 3600.0,
            calibration_ttl_s=settings.calibration_ttl_s,
            models=load_catalog(
                settings.model_profiles_file, settings.model_limits, counting_method
            ),
        )


def _release_book(
    ports: Adapters,
    counter: CachedCounter,
    hooks: HookRegistry,
    compaction_hooks: Collection[str],
    models: ModelCatalog,
) -> ReleaseBook:
    # R17: a release may bind the hooks this deployment loads, Prepare's and compaction's,
    # each at the points it serves (a hook bound where it does not answer fails every
    # prepare or job: refused at publish instead).
    known_hooks = frozenset(
        [at_point(p, c) for c in compaction_hooks for p in COMPACT_POINTS]
        + [
            at_point(p, hook_source(h))
            for h in hooks.hooks
            for p, m in METHODS.items()
            if hasattr(h, m)
        ]
    )

    async def release_of_session(sid: str) -> str:
        s = await ports.sessions.get(sid)
        if s is None:
            raise NotFound(f"session {sid} not found")
        return s.release_id

    return ReleaseBook(
        ports.releases, release_of_session, counter.method, known_hooks, catalog=models
    )


def _gateway(
    ports: Adapters,
    content: ContentStore,
    prepared: PreparedStore,
    notes: Notes,
    hooks: HookRegistry,
    calibration: CalibrationCache,
    access: Access,
    releases: ReleaseBook,
) -> Gateway:
    """The gateway runs the hooks a call's session's release binds (R14, R1.4)."""
    calls = ports.model_calls
    return Gateway(calls, content, prepared, notes, hooks, calibration, access.space_of, releases)


# Render states are stored for views of this many records or more: a smaller view
# renders in full in a few tens of milliseconds after a restart, less than storing its
# state at every new run costs.
STORE_MIN_RECORDS = 1000


def _thread_views(ports: Adapters, counter: CachedCounter) -> ThreadViews:
    # A cold load pauses this process's cyclic collector while it builds (built_to_keep).
    return ThreadViews(
        ports.threads,
        counter.count,
        states=ports.render_states,
        counting=counter.method,
        building=built_to_keep,
        store_min=STORE_MIN_RECORDS,
        frontier=ports.thread_frontier,
        read_aheads=ports.read_aheads,
    )


def build_service(
    ports: Adapters,
    options: Options,
    counter: CachedCounter,
    hooks: HookRegistry | None = None,
    compaction_hooks: Collection[str] = (),
    clock: Callable[[], float] = time.monotonic,
) -> PrepareService:
    """The use cases over ``ports``; one wiring for the process and for unit tests.
    ``compaction_hooks``: the compaction service's hook ids (for the check at publish);
    ``clock``: the calibration cache's and the key and grant caches'."""
    hooks = hooks or HookRegistry()
    releases = _release_book(ports, counter, hooks, compaction_hooks, options.models)
    views = _thread_views(ports, counter)
    content = ContentStore(ports.blobs, counter)
    prepared = PreparedStore(
        ports.prepared, options.prepared_capacity, retention_s=options.prepared_retention_s
    )
    notes = Notes(ports.notes or ports.publisher, options.topic_observability)
    calibration = CalibrationCache(ports.calibrations, options.calibration_ttl_s, clock)
    topic = options.topic_records
    check = CompactionCheck(
        ports.compaction, views, ports.publisher, topic, ports.waiter, options.compaction_wait_s
    )
    access = Access(ports.find_key, ports.sessions, releases, options.key_cache_s, clock)
    return PrepareService(
        releases=releases,
        runs=Runs(
            ports.sessions,
            releases,
            ports.publisher,
            topic,
            ports.waiter,
            views,
            options.commit_wait_s,
            options.host_id,
        ),
        preparer=Preparer(
            releases,
            views,
            ports.waiter,
            check,
            content,
            prepared,
            notes,
            calibration,
            options.commit_wait_s,
            hooks,
            ports.frontier or NoFrontier(),
            access.space_of,
        ),
        gateway=_gateway(ports, content, prepared, notes, hooks, calibration, access, releases),
        readback=ReadBack(ports.records, ports.sessions, views, access, notes),
        access=access,
        content=content,
        pool=ports.pool,
    )


def pg_adapters(
    pool: asyncpg.Pool, publisher: Publisher, waiter: Waiter, *, render_states: bool = False
) -> Adapters:
    return Adapters(
        releases=PgReleases(pool),
        sessions=PgSessions(pool),
        model_calls=PgModelCalls(pool),
        blobs=PgBlobs(pool),
        records=PgRecords(pool),
        compaction=PgCompactionReads(pool),
        threads=PgThreads(pool),
        find_key=partial(find_key, pool),
        publisher=publisher,
        waiter=waiter,
        prepared=PgPreparedContexts(pool),
        calibrations=PgCalibrations(pool),
        pool=pool,
        render_states=PgRenderStates(pool) if render_states else None,
        frontier=PgFrontier(pool),
        thread_frontier=PgThreadFrontier(pool),
        read_aheads=PgReadAheads(pool),
    )


def notes_publisher(settings: Settings) -> AiokafkaPublisher:
    """The observability notes' own producer: it waits ``observability_linger_ms`` for
    more notes before it sends (nobody waits for one), so the notes of many prepares
    share a request."""
    return AiokafkaPublisher(
        settings.kafka_bootstrap,
        kafka_auth(settings, "prepare"),
        signer=service_signer(settings, "prepare"),
        linger_ms=settings.observability_linger_ms,
    )


@contextlib.asynccontextmanager
async def running_service(settings: Settings) -> AsyncIterator[PrepareService]:
    """The process's service over PostgreSQL and Kafka; closed on exit."""
    traces = tracing.configure(settings, "agentloom-prepare")  # ALC_TRACE_EXPORTER
    await apply_dsn(configured_dsn(settings))
    await ensure_topics(settings, role="prepare")
    dsn = dsn_of(settings, "prepare")  # its own login (storage/roles.py)
    pool = await create_pool(
        dsn, settings.pg_pool_min, settings.pg_pool_max, plan_cache_mode=settings.pg_plan_cache_mode
    )
    # Run lifecycle events and budget observations carry Prepare's envelope.
    publisher = AiokafkaPublisher(
        settings.kafka_bootstrap,
        kafka_auth(settings, "prepare"),
        signer=service_signer(settings, "prepare"),
    )
    notes = notes_publisher(settings)
    await publisher.start()
    await notes.start()
    waiter = CommitWaiter(pool, settings.processor_id, settings.topic_records)
    await waiter.start(dsn)
    counter = CachedCounter(make_counter("cl100k_base", settings.tiktoken_file))
    adapters = replace(
        pg_adapters(pool, publisher, waiter, render_states=settings.prepare_render_states),
        notes=notes,
    )
    options = Options.from_settings(settings, counter.method)
    hooks = load_hooks(settings.prepare_hooks)
    svc = build_service(adapters, options, counter, hooks, hook_ids(settings.compaction_hooks))
    await svc.gateway.seed_calibration()
    try:
        targets: dict[str, tuple[Prunable, float]] = {
            "prepared contexts": (adapters.prepared, options.prepared_retention_s),
            # the stored views of calls, kept as long as their prepared contexts.
            "call views": (PgCallViews(pool), options.call_view_retention_s),
        }
        if adapters.render_states is not None:
            targets["render states"] = (adapters.render_states, options.render_state_retention_s)
        async with pruning(targets):
            yield svc
    finally:
        await svc.gateway.prepared.flush()  # contexts written behind their answers
        await waiter.close()
        await publisher.stop()
        await notes.stop()
        await pool.close()
        if traces is not None:
            traces.shutdown()  # the spans still batched are exported
