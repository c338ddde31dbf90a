"""Cold prepare (issue 13, item 2), measured for ``benchmarks.prepare_scale``.

A view is cold after a restart, on another Prepare instance, after a new summary or a
revocation. Two cold paths are timed on the benchmark's synthetic session:

- **full**: no stored state (a new summary or revocation epoch changes the fingerprint):
  every record rendered again, then assembled — what every cold prepare did before;
- **restart**: the view's stored render state (``domain.render_state``) read back, the
  records committed since it was stored fed, then assembled — what ``ThreadViews`` does
  after a restart. The state lags the view by the most the refresh rule allows
  (``services.prepare.views``: a tenth of its records, at least ``SAVE_MIN``; here at
  most the current run's records, since a state is stored once the inherited history is
  rendered), so this is the worst case of that rule. When PostgreSQL is reachable the
  state's row is read from a table like ``render_states`` each time; otherwise the bytes
  come from memory.

Each is repeated ``restarts`` times with nothing kept between runs (a fresh renderer and a
fresh token cache: a restarted process has neither); p50/p99 over the runs.
"""

from __future__ import annotations

import gc
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from domain.render_state import dump, load
from domain.rendering import RecordView, ThreadRenderer
from domain.tokens import CachedCounter, TokenCounter
from services.prepare.views import SAVE_MIN, SAVE_SHARE

TARGET_MS = {10_000: 100.0, 100_000: 1000.0}  # issue 13: p99 of a cold prepare


@dataclass
class Cold:
    state_bytes: int
    lag_records: int
    restarts: int
    via_postgres: bool
    full_p50_ms: float
    full_p99_ms: float
    restart_p50_ms: float
    restart_p99_ms: float
    restart_cpu_p99_ms: float  # this process's CPU time: what the load of others hides
    target_ms: float | None


def _pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def _counter(raw: TokenCounter) -> Callable[[str], int]:
    cached = CachedCounter(raw)  # a restarted process starts with an empty cache

    def count(text: str) -> int:
        return cached.count_keyed(hashlib.sha256(text.encode()).hexdigest(), text)

    return count


class _Row:
    """The stored state's row, read as ``storage.render_states`` reads it, or memory."""

    def __init__(self, dsn: str | None) -> None:
        self.dsn = dsn
        self.conn: asyncpg.Connection | None = None
        self.data = b""

    async def open(self, data: bytes) -> bool:
        self.data = data
        if self.dsn is None:
            return False
        try:
            self.conn = await asyncpg.connect(self.dsn, timeout=5)
        except (TimeoutError, OSError, asyncpg.PostgresError):
            return False
        await self.conn.execute(
            "CREATE TEMP TABLE bench_render_states (session_id text PRIMARY KEY,"
            " last_sequence bigint NOT NULL, state bytea NOT NULL)"
        )
        await self.conn.execute("INSERT INTO bench_render_states VALUES ('s', 0, $1)", data)
        return True

    async def read(self) -> bytes:
        if self.conn is None:
            return self.data
        row = await self.conn.fetchrow(
            "SELECT last_sequence, state FROM bench_render_states WHERE session_id = 's'"
        )
        assert row is not None
        return bytes(row["state"])

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


async def measure(
    records: list[RecordView],
    start: int,
    raw: TokenCounter,
    build: Callable[[list[RecordView], int, Callable[[str], int]], ThreadRenderer],
    prepare: Callable[[ThreadRenderer, list[RecordView], Callable[[str], int]], int],
    restarts: int,
    dsn: str | None,
    size: int,
) -> Cold:
    """``size`` is the nominal size (the targets' key); ``build`` renders records from
    scratch; ``prepare`` feeds new records, assembles and returns the estimate (the warm
    path's own functions)."""
    n = len(records)
    # A state is stored after the full render (history sealed), so only the thread's own
    # records can lag behind it.
    lag = min(max(SAVE_MIN, n // SAVE_SHARE) - 1, n - start)
    stored_at = n - lag
    state = dump(build(records[:stored_at], start, _counter(raw)))
    full: list[float] = []
    cold: list[float] = []
    cpu: list[float] = []
    estimates: set[int] = set()
    row = _Row(dsn)
    via_pg = await row.open(state)
    try:
        for _ in range(restarts):
            gc.collect()
            t0 = time.perf_counter()
            count = _counter(raw)
            estimates.add(prepare(build(records, start, count), [], count))
            full.append((time.perf_counter() - t0) * 1000)
            gc.collect()
            t0, c0 = time.perf_counter(), time.process_time()
            count = _counter(raw)
            rend = load(await row.read(), count)
            assert rend is not None
            estimates.add(prepare(rend, records[stored_at:], count))
            cold.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
    finally:
        await row.close()
    if len(estimates) != 1:  # both paths must prepare the same context
        raise AssertionError(f"cold paths disagree: {sorted(estimates)}")
    return Cold(
        state_bytes=len(state),
        lag_records=lag,
        restarts=restarts,
        via_postgres=via_pg,
        full_p50_ms=round(_pct(full, 50), 1),
        full_p99_ms=round(_pct(full, 99), 1),
        restart_p50_ms=round(_pct(cold, 50), 1),
        restart_p99_ms=round(_pct(cold, 99), 1),
        restart_cpu_p99_ms=round(_pct(cpu, 99), 1),
        target_ms=TARGET_MS.get(size),
    )


def verdict(c: Cold) -> str:
    if c.target_ms is None:
        return "—"
    return f"≤ {c.target_ms:,.0f} ({'met' if c.restart_p99_ms <= c.target_ms else 'NOT met'})"
