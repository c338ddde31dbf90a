"""``python -m benchmarks.ingest_floor``: the CPU an ingested event costs in the libraries
alone, beside the per-event budget issue 13's two ratios leave on this machine.

The processor must, for every event, whatever our own code does around it:
- check its signed envelope (HMAC-SHA256 over key and value, the signer's secret cached),
- decode its Avro body (fastavro),
- check its content hash (SHA-256, R3.4) and count its tokens (tiktoken, R6),
- write its row (asyncpg COPY, the client's side),
- encode its committed record (fastavro) and publish it (aiokafka's batch API).

Each is timed here in process CPU time on the benchmark's own events (``make bench``'s
question rounds), and summed. Left out, so the real floor is higher: the consumer's
fetch and record parsing, the transaction's other statements, the broker and PostgreSQL.

The budgets come from ``build/bench/results.json`` (``benchmarks.run`` of the same
machine): the faust target (drain ≥ 0.8 of a no-op faust agent, which is CPU bound)
leaves 1/4 of the no-op agent's CPU per event to everything the processor adds; the
aiokafka target (end to end ≥ 0.5 of the per-send producer ceiling) leaves the 2 cores'
time at that rate for the SDK, the processor, the broker and PostgreSQL together.
Prints a table and writes ``build/bench/ingest_floor.json``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer

from benchmarks.ceilings import bench_row
from benchmarks.run import OUT
from domain.auth import host_key
from domain.context.envelope import BusKey, Headers, KeySigner, VerifyKeys
from domain.record_rows import RECORD_COLUMNS
from schemas import codec
from schemas.contracts import ToolStatus
from schemas.settings import Settings
from schemas.wire import CommittedRecord, encode_committed, encode_event
from services.sdk.appends import RunHandle
from storage.migrate import apply_dsn
from storage.pool import create_pool
from storage.tokenizers import make_counter
from streams.envelopes import Authenticator

N = 20_000


def _events() -> list[Any]:
    from devstack.events import question_round  # the builders make bench uses

    run = RunHandle("sess-" + "a" * 30, "run-" + "b" * 30, "main", "bench", "bench", {})
    out: list[Any] = []
    for r in range(N // 5):
        out += question_round(run, f"i{r}", (ToolStatus.OK, ToolStatus.ERROR))
    return out


def cpu_us(fn: Callable[[], object], n: int) -> float:
    """CPU µs per item of ``fn()`` processing ``n`` items (best of 3)."""
    best = float("inf")
    for _ in range(3):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best / n * 1e6


async def _copy_us(rows: list[tuple[Any, ...]]) -> float:
    """The client's CPU per row of asyncpg's COPY (the server works on the other core)."""
    await apply_dsn(Settings().pg_dsn)  # a fresh `make up` has no tables yet
    pool = await create_pool(Settings().pg_dsn, 1, 1)
    try:
        async with pool.acquire() as conn:
            await conn.execute("CREATE TEMP TABLE floor_records (LIKE records INCLUDING DEFAULTS)")
            t = time.process_time()
            for i in range(0, len(rows), 2000):
                await conn.copy_records_to_table(
                    "floor_records", records=rows[i : i + 2000], columns=RECORD_COLUMNS
                )
            return (time.process_time() - t) / len(rows) * 1e6
    finally:
        await pool.close()


@dataclass(frozen=True)
class _Signed:
    key: bytes
    value: bytes
    headers: Headers


class _OneKey:
    async def bus_keys(self, key_ids: Sequence[str]) -> dict[str, BusKey]:
        return {i: BusKey("bench", "host") for i in key_ids}


async def envelope_us(data: list[bytes]) -> tuple[float, float]:
    """CPU µs per message: the runtime's signature (the SDK side) and the processor's
    check of it (headers parsed, the key's secret cached as between two lookups)."""
    issuer, key_id = b"i" * 32, "0" * 16
    signer = KeySigner.of(key_id, host_key(key_id, issuer).key)
    sign = cpu_us(lambda: [signer.headers(b"sess", d) for d in data], len(data))
    msgs = [_Signed(b"sess", d, signer.headers(b"sess", d)) for d in data]
    vk = VerifyKeys({}, (issuer,))
    auth = Authenticator(_OneKey(), lambda: vk)
    await auth.signers(msgs[:1])  # the key's lookup and derivation, once per 10 s
    best = float("inf")
    for _ in range(3):
        t = time.process_time()
        found = await auth.signers(msgs)
        best = min(best, time.process_time() - t)
    assert all(found), "a message the benchmark signed did not verify"
    return sign, best / len(msgs) * 1e6


async def measure() -> dict[str, float]:
    events = _events()
    data = [encode_event(e) for e in events]
    sign_us, check_us = await envelope_us(data)
    texts = [e.content.inline or "" for e in events]
    counter = make_counter()
    committed = CommittedRecord(
        "rec_" + "0" * 32, "sess-" + "a" * 30, 1, "run", "main", 1, "key", "user_input", 12,
        "tiktoken:cl100k_base", "0" * 64, 1_700_000_000_000, 3, 123_456,
    )  # fmt: skip
    producer = AIOKafkaProducer(bootstrap_servers="unused:9092")  # create_batch only

    def batches() -> None:
        batch = producer.create_batch()
        value = encode_committed(committed)
        for _ in range(len(events)):
            if batch.append(key=b"sess", value=value, timestamp=None) is None:
                batch = producer.create_batch()

    rows = [bench_row(i, t) for i, t in enumerate(texts)]
    n = len(events)
    try:
        return {
            "envelope check (HMAC, signer cached)": check_us,
            "fastavro decode of the event": cpu_us(
                lambda: [codec.decode(codec.CONTEXT_EVENT, d) for d in data], n
            ),
            "sha256 of the content (R3.4)": cpu_us(
                lambda: [hashlib.sha256(t.encode()).hexdigest() for t in texts], n
            ),
            "tiktoken count (R6)": cpu_us(lambda: [counter.count(t) for t in texts], n),
            "asyncpg COPY of the row (client)": await _copy_us(rows),
            "fastavro encode of the committed record": cpu_us(
                lambda: [encode_committed(committed) for _ in range(n)], n
            ),
            "aiokafka batch append of it": cpu_us(batches, n),
            "SDK side: encode of the event (to_avro + fastavro)": cpu_us(
                lambda: [encode_event(e) for e in events], n
            ),
            "SDK side: envelope signature": sign_us,
        }
    finally:
        await producer.stop()  # never started: this only closes it


def main() -> None:
    parts = asyncio.run(measure())
    sdk = parts.pop("SDK side: encode of the event (to_avro + fastavro)")
    sign = parts.pop("SDK side: envelope signature")
    floor = sum(parts.values())
    try:
        ingest = json.loads((OUT / "results.json").read_text())["ingest"]
    except (OSError, ValueError, KeyError):
        ingest = {}
    noop = ingest.get("noop_faust_events_per_s")
    prod = ingest.get("producer_ceiling_events_per_s")
    # The faust target with the processor in a child process (ALC_PROCESSOR_OFFLOAD): at
    # 0.8 of the no-op rate the 2 cores give 2e6 / (0.8 noop) µs per event to everything;
    # the faust process costs what the no-op agent does (CPU bound: 1e6 / noop), and the
    # rest is for the child, the broker and PostgreSQL.
    faust_budget = 2e6 / (0.8 * noop) - 1e6 / noop if noop else None
    # 2 cores' time per event at half the producer ceiling, for every process together.
    e2e_budget = 2e6 / (0.5 * prod) if prod else None
    # the SDK encodes, signs and sends it too
    e2e_floor = floor + sdk + sign + parts["aiokafka batch append of it"]
    print("\n| library work per ingested event | CPU µs |\n|---|---:|")
    for name, us in parts.items():
        print(f"| {name} | {us:.1f} |")
    print(f"| **processor floor (sum)** | **{floor:.1f}** |")
    for name, d in (ingest.get("drivers") or {}).items():
        if d.get("processor_cpu_us_per_event"):
            print(
                f"| measured: the {name} processor, all of it | {d['processor_cpu_us_per_event']} |"
            )
    print(f"| SDK: encode of the event + batch append | {sdk:.1f} + |")
    print(f"| SDK: envelope signature | {sign:.1f} |")
    if faust_budget is not None:
        print(
            f"\nfaust target (processor offloaded): beside faust's own {1e6 / noop:.0f} µs per"
            f" event (the no-op agent, {noop:,} ev/s), the child processor, the broker and"
            f" PostgreSQL must fit in {faust_budget:.0f} µs of the 2 cores; the library floor"
            f" of the child is {floor:.0f} µs ({floor / faust_budget:.2f}x the budget)"
        )
    measured = (ingest.get("drivers") or {}).get("aiokafka", {})
    if e2e_budget is not None and measured.get("e2e_machine_cpu_us_per_event"):
        print(
            f"measured: end to end, the aiokafka driver's pipeline costs the machine"
            f" {measured['e2e_machine_cpu_us_per_event']} µs of CPU per event (every process;"
            f" {measured['e2e_machine_cpu_us_per_event'] / e2e_budget:.1f}x the budget), of"
            f" which the broker and PostgreSQL {measured.get('infra_cpu_us_per_event')} µs"
        )
    if e2e_budget is not None:
        print(
            f"aiokafka target: SDK + processor + broker + PostgreSQL must fit in "
            f"{e2e_budget:.0f} µs of the 2 cores per event at {0.5 * prod:,.0f} ev/s; "
            f"the SDK + processor library floor alone is {e2e_floor:.0f} µs"
            f" ({e2e_floor / e2e_budget:.2f}x the budget: out of reach on this machine"
            f" whatever our own code costs)"
            if e2e_floor > e2e_budget
            else f"aiokafka target: budget {e2e_budget:.0f} µs, library floor {e2e_floor:.0f} µs"
        )
    out = {
        "parts_us": parts,
        "processor_floor_us": floor,
        "sdk_encode_us": sdk,
        # per message, the 800-byte-ish benchmark events (docs/design-notes.md)
        "envelope_sign_us": sign,
        "envelope_verify_us": parts["envelope check (HMAC, signer cached)"],
        "faust_budget_us": faust_budget,
        "e2e_budget_us": e2e_budget,
        "e2e_floor_us": e2e_floor,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ingest_floor.json").write_text(json.dumps(out, indent=2))
    print(f"\n[bench] wrote {OUT / 'ingest_floor.json'}")


if __name__ == "__main__":
    main()
