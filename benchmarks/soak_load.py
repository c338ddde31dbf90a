"""The soak's load: many sessions, each a loop of agent questions through the real SDK —
appends over Kafka (acks=all), run start / prepare / finish over HTTP — that rides out
outages by retrying with backoff (tenacity). Retrying is safe because every call is
idempotent: appends by ``event_key``, run starts by ``run_id``, finishes by the key we
pass.

The ``Ledger`` is what the checks compare the database with: every key we *sent*
(attempted, maybe committed) and every key that was *acknowledged* (the SDK call
returned). A step is "appends acknowledged, then a prepare answered"; the chaos measures
recovery as the time until the first such step whose appends all came after a fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from aiokafka.errors import KafkaError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_delay,
    wait_exponential_jitter,
)

from services.bus import EventBus
from services.sdk.client import ApiError, ContextClient, RunHandle

T = TypeVar("T")

PROFILE = {"name": "soak-16k", "context_capacity": 16_384, "output_reserve": 2_048,
           "safety_margin": 512}  # fmt: skip
# Compaction every third question per session: jobs run all the time, so kills of the
# compaction service land mid-job and the R15.3 check has something to check.
POLICY = {"recent_complete_groups": 1, "compaction": {"user_turns": 3, "context_ratio": 0.8}}
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]
# What an outage looks like to a runtime. Everything else (401, 404, run_active, ...) is
# a bug under test, not weather: the session stops and the soak fails.
RETRY_CODES = frozenset({"not_committed_yet", "timeout", "unavailable", "http_500"})
APPEND_TIMEOUT_S = 45.0  # above the producer's own 40 s request timeout


def retriable(exc: BaseException) -> bool:
    if isinstance(exc, ApiError):
        return exc.retriable or exc.code in RETRY_CODES or exc.status >= 500
    # Raw transport errors and a 5xx page that is not JSON too: older SDKs raised them
    # unwrapped.
    return isinstance(
        exc, KafkaError | OSError | TimeoutError | httpx.TransportError | json.JSONDecodeError
    )


def code_of(exc: BaseException | None) -> str:
    if isinstance(exc, ApiError):
        return exc.code
    return type(exc).__name__


@dataclass
class Ledger:
    attempted: dict[str, set[str]] = field(default_factory=dict)
    acked: dict[str, set[str]] = field(default_factory=dict)
    # (monotonic time the step's first append was acknowledged, time its prepare answered)
    steps: list[tuple[float, float]] = field(default_factory=list)
    retries: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    appends: int = 0
    prepares: int = 0
    questions: int = 0
    question_misses: int = 0  # prepared contexts without the run's question verbatim
    model_calls: int = 0  # gateway checks passed (LoadConfig.model_calls)
    # prepared_not_found answered by preparing again: the session's Prepare instance
    # changed between its prepare and its model call (failover) and contexts are per
    # instance (issue 13).
    reprepared: int = 0

    def attempt(self, sid: str, key: str) -> None:
        self.attempted.setdefault(sid, set()).add(key)

    def ack(self, sid: str, key: str) -> None:
        self.acked.setdefault(sid, set()).add(key)

    def acked_count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def recovered_at(self, since: float) -> float | None:
        """When the first step whose appends all came after ``since`` was prepared."""
        done = [ok for first_ack, ok in self.steps if first_ack >= since]
        return min(done) if done else None


@dataclass(frozen=True)
class LoadConfig:
    bootstrap: str
    prepare_url: str
    topic: str
    api_key: str
    space: str
    sessions: int
    give_up_s: float  # one call retried longer than this stops its session
    think_s: float
    seed: int
    # Each prepare followed by the gateway's check (POST .../model-calls), as a runtime
    # does before calling its model.
    model_calls: bool = False
    # Session index -> the HTTP transport its SDK client sends through (the scale test's
    # fail-over between Prepare instances); None: straight to ``prepare_url``.
    http_transport: Callable[[int], httpx.AsyncBaseTransport] | None = None


class SessionDriver:
    """One session's runtime: its own SDK client (producer + HTTP), questions in a row."""

    def __init__(self, cfg: LoadConfig, ledger: Ledger, idx: int, release_id: str) -> None:
        self.cfg, self.ledger, self.release_id = cfg, ledger, release_id
        self.sid = f"{cfg.space}-s{idx:03d}"
        self.rng = random.Random(cfg.seed * 1000 + idx)
        transport = cfg.http_transport(idx) if cfg.http_transport is not None else None
        self.client = ContextClient(
            cfg.bootstrap, cfg.prepare_url, cfg.topic, api_key=cfg.api_key, http_transport=transport
        )
        self._producer_broken = False
        self._step_first_ack: float | None = None

    async def run(self, stop: asyncio.Event) -> None:
        await self._retry(self._start_producer)
        try:
            session = await self._retry(
                lambda: self.client.open_session(
                    self.cfg.space, "soak-user", self.release_id, self.sid
                )
            )
            n = 0
            while not stop.is_set():
                await self.question(session, n)  # a started question is always finished
                n += 1
        except Exception as exc:
            # the error's details (a reason, the job waited for) say why, not only what
            details = getattr(exc, "details", None) or ""
            self.ledger.errors.append(
                f"{self.sid}: {code_of(exc)}: {str(exc)[:300]} {str(details)[:500]}".rstrip()
            )
            print(f"[soak] session {self.ledger.errors[-1]}", flush=True)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.client.__aexit__(), 10)

    async def question(self, session: dict[str, Any], n: int) -> None:
        c, rng = self.client, self.rng
        run_id = f"{self.sid}-r{n}"
        self.ledger.attempt(self.sid, f"run_started:{run_id}")
        run = await self._retry(lambda: c.start_run(session, run_id))
        self.ledger.ack(self.sid, f"run_started:{run_id}")
        text = f"Q{n} of {self.sid}: why does module m{rng.randrange(40)} fail on {rng.random()}?"
        await self._append(f"q{n}", lambda: c.append_user(run, text, f"q{n}"))
        await self._prepare(run, text)
        for k in range(rng.randint(1, 2)):
            await self.tool_step(run, f"r{n}c{k}", f"src/m{n % 40}/f{k}.py")
            await self._prepare(run, text)
        await self._append(
            f"model:r{n}-a", lambda: c.append_model_result(run, f"Answer {n}: fixed.", f"r{n}-a")
        )
        finish = f"finish:{run_id}"
        self.ledger.attempt(self.sid, finish)
        await self._retry(lambda: c.finish_run(run, event_key=finish))
        self.ledger.ack(self.sid, finish)
        self.ledger.questions += 1

    async def tool_step(self, run: RunHandle, call: str, path: str) -> None:
        """A model message calling a tool, then the tool's result."""
        c = self.client
        args = json.dumps({"path": path})
        await self._append(
            f"model:{call}-m",
            lambda: c.append_model_result(
                run, f"Reading {call}.", f"{call}-m", [(call, "read_file", args)]
            ),
        )
        body = " ".join(
            f"line{i}={self.rng.randrange(10**6)}" for i in range(self.rng.randint(20, 80))
        )
        await self._append(
            f"tool:{call}", lambda: c.append_tool_outcome(run, call, "read_file", body)
        )

    async def _append(self, key: str, send: Callable[[], Awaitable[tuple[int, int]]]) -> None:
        self.ledger.attempt(self.sid, key)

        async def once() -> tuple[int, int]:
            if self._producer_broken:
                await self._renew_producer()
            try:
                return await asyncio.wait_for(send(), APPEND_TIMEOUT_S)
            except (KafkaError, TimeoutError):
                # A send that failed may still be delivered later: harmless (same key).
                # The producer is replaced so that a wedged one cannot stall the session.
                self._producer_broken = True
                raise

        await self._retry(once)
        self.ledger.ack(self.sid, key)
        self.ledger.appends += 1
        if self._step_first_ack is None:
            self._step_first_ack = time.monotonic()

    async def _prepare(self, run: RunHandle, question: str) -> None:
        prepared = await self._retry(lambda: self.client.prepare(run))
        self.ledger.prepares += 1
        if self.cfg.model_calls:
            prepared = await self._model_call(run, prepared)
        if not any(m.get("content") == question for m in prepared.get("messages", [])):
            self.ledger.question_misses += 1
        if self._step_first_ack is not None:
            self.ledger.steps.append((self._step_first_ack, time.monotonic()))
            self._step_first_ack = None
        await asyncio.sleep(self.rng.uniform(0.5, 1.5) * self.cfg.think_s)

    async def _model_call(self, run: RunHandle, prepared: dict[str, Any]) -> dict[str, Any]:
        """The gateway's check of ``prepared``; on ``prepared_not_found`` (another Prepare
        instance answered the prepare) prepare again and check that. Returns what passed."""
        for _ in range(5):
            try:
                await self._retry(functools.partial(self.client.check_model_call, run, prepared))
            except ApiError as exc:
                if exc.details.get("reason") != "prepared_not_found":
                    raise
                self.ledger.reprepared += 1
                prepared = await self._retry(lambda: self.client.prepare(run))
                self.ledger.prepares += 1
                continue
            self.ledger.model_calls += 1
            return prepared
        raise AssertionError(f"{self.sid}: prepared_not_found after 5 prepares in a row")

    async def _start_producer(self) -> None:
        await self.client.producer.start()

    async def _renew_producer(self) -> None:
        old = self.client.producer
        with contextlib.suppress(Exception):
            await asyncio.wait_for(old.stop(), 5)
        fresh = EventBus(self.cfg.bootstrap, self.cfg.topic, self.cfg.api_key)
        fresh.last_offsets = old.last_offsets  # read-your-writes across the swap
        self.client.producer = fresh
        await fresh.start()  # raises while Kafka is away: retried, still broken
        self._producer_broken = False

    async def _retry(self, fn: Callable[[], Awaitable[T]]) -> T:
        def note(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            self.ledger.retries[code_of(exc)] += 1

        async for attempt in AsyncRetrying(
            retry=retry_if_exception(retriable),
            wait=wait_exponential_jitter(initial=0.1, max=2.0),
            stop=stop_after_delay(self.cfg.give_up_s),
            before_sleep=note,
            reraise=True,
        ):
            with attempt:
                return await fn()
        raise AssertionError("unreachable: tenacity reraises")


async def register_release(cfg: LoadConfig) -> str:
    async with ContextClient(cfg.bootstrap, cfg.prepare_url, cfg.topic, api_key=cfg.api_key) as c:
        rel = await c.register_release(
            agent_id="soak",
            instructions="You are a careful engineer. Answer from the tools.",
            tool_catalog=TOOLS,
            model_profile=PROFILE,
            context_policy=POLICY,
        )
    return str(rel["release_id"])


async def run_load(cfg: LoadConfig, ledger: Ledger, stop: asyncio.Event) -> None:
    """Drive ``cfg.sessions`` sessions until ``stop`` is set; each finishes its question."""
    release_id = await register_release(cfg)
    drivers = [SessionDriver(cfg, ledger, i, release_id) for i in range(cfg.sessions)]
    await asyncio.gather(*(d.run(stop) for d in drivers))
