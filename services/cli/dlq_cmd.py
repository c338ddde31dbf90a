"""``agentloom dlq list|show|replay``: the dead-letter topic (schemas/wire.py DeadLetter).

A letter carries the original key and value bytes, its source topic, partition and
offset, and the reason code. ``replay`` republishes the original bytes to the source
topic; a letter whose original was cut to fit (``fit_dead_letter``) is replayed from the
source topic at the recorded offset, checked against the recorded sha256.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from rich.progress import Progress
from rich.table import Table

from schemas.errors import ContextError, NotFound, NotGranted
from schemas.settings import Settings
from schemas.wire import DeadLetter, decode_dead_letter, truncated_original
from services.cli.output import JsonOption, fail, out, show
from streams.kafka_auth import kafka_auth

app = typer.Typer(no_args_is_help=True, help="Dead letters: list, show, replay.")


@dataclass(frozen=True)
class Letter:
    partition: int
    offset: int
    letter: DeadLetter

    @property
    def ref(self) -> str:
        return f"{self.partition}:{self.offset}"

    def summary(self) -> dict[str, Any]:
        d = self.letter
        return {
            "ref": self.ref,
            "reason_code": d.reason_code,
            "source": f"{d.source_topic}:{d.source_partition}:{d.source_offset}",
            "session_id": d.session_id,
            "event_key": d.event_key,
            "failed_at_ms": d.failed_at_ms,
            "value_bytes": len(d.value or b""),
            "truncated": truncated_original(d) is not None,
        }


def _auth() -> dict[str, Any]:
    """The CLI's broker principal (``cli``: streams.kafka_auth)."""
    return kafka_auth(Settings(), "cli").client_kwargs()


async def _read(bootstrap: str, topic: str, start: dict[int, int] | None = None) -> list[Letter]:
    """Every letter now in ``topic`` (or the ones at ``start``: partition -> offset)."""
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **_auth())
    await c.start()
    try:
        parts = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or ())]
        if not parts:
            parts = [TopicPartition(topic, p) for p in await _partitions(c, topic)]
        c.assign(parts)
        ends = await c.end_offsets(parts)
        firsts = await c.beginning_offsets(parts)
        letters: list[Letter] = []
        for tp in parts:
            lo = firsts[tp] if start is None else start.get(tp.partition, ends[tp])
            if lo >= ends[tp]:
                continue
            c.seek(tp, lo)
            letters += await _drain(c, tp, ends[tp] if start is None else lo + 1)
        return sorted(letters, key=lambda x: (x.letter.failed_at_ms, x.partition, x.offset))
    finally:
        await c.stop()


async def _partitions(c: AIOKafkaConsumer, topic: str) -> set[int]:
    await c._client.force_metadata_update()  # the topic may be unknown to a fresh client
    if topic in c._client.cluster.unauthorized_topics:
        raise NotGranted(
            f"the broker does not let this principal read {topic} (ACLs: streams.provision)",
            topic=topic,
        )
    return c.partitions_for_topic(topic) or set()


async def _drain(c: AIOKafkaConsumer, tp: TopicPartition, end: int) -> list[Letter]:
    out_: list[Letter] = []
    while (await c.position(tp)) < end:
        batch = await c.getmany(tp, timeout_ms=2000)
        for msg in batch.get(tp, []):
            if msg.offset < end and msg.value is not None:
                out_.append(Letter(tp.partition, msg.offset, decode_dead_letter(msg.value)))
    return out_


def _refs(refs: list[str]) -> dict[int, int]:
    res: dict[int, int] = {}
    for r in refs:
        p, _, o = r.partition(":")
        if not (p.isdigit() and o.isdigit()):
            raise typer.BadParameter(f"{r!r}: expected PARTITION:OFFSET (as dlq list prints)")
        res[int(p)] = int(o)
    return res


@app.command("list")
def list_(
    reason: Annotated[str | None, typer.Option(help="only this reason code")] = None,
    limit: Annotated[int, typer.Option(help="at most this many (newest)")] = 100,
    as_json: JsonOption = False,
) -> None:
    """Dead letters, oldest first: reference, reason code, source, session."""
    s = Settings()
    try:
        letters = asyncio.run(_read(s.kafka_bootstrap, s.topic_dead_letter))
    except Exception as exc:
        fail(exc, as_json)
    rows = [x.summary() for x in letters if reason in (None, x.letter.reason_code)][-limit:]

    def render() -> None:
        t = Table(title=f"{s.topic_dead_letter}: {len(rows)} letters")
        for c in ("ref", "reason_code", "source", "session_id", "value_bytes", "truncated"):
            t.add_column(c)
        for r in rows:
            t.add_row(
                *(str(r[c]) for c in ("ref", "reason_code", "source")),
                str(r["session_id"]),
                str(r["value_bytes"]),
                str(r["truncated"]),
            )
        out.print(t)

    show(as_json, {"topic": s.topic_dead_letter, "letters": rows}, render)


@app.command("show")
def show_(
    ref: Annotated[str, typer.Argument(help="PARTITION:OFFSET of the letter")],
    as_json: JsonOption = False,
) -> None:
    """One letter whole: reason, source, and the original bytes' size, sha256 and head."""
    s = Settings()
    try:
        found = asyncio.run(_read(s.kafka_bootstrap, s.topic_dead_letter, _refs([ref])))
        if not found:
            raise NotFound(f"no dead letter at {ref}")
    except (typer.BadParameter, ContextError) as exc:
        fail(exc, as_json)
    x = found[0]
    value = x.letter.value or b""
    data = x.summary() | {
        "reason": x.letter.reason,
        "key": (x.letter.key or b"").decode("utf-8", "replace"),
        "value_sha256": hashlib.sha256(value).hexdigest(),
        "value_head": value[:64].hex(),
    }

    def render() -> None:
        for k, v in data.items():
            out.print(f"[bold]{k}[/] {v}")

    show(as_json, data, render)


@app.command()
def replay(
    refs: Annotated[list[str] | None, typer.Argument(help="PARTITION:OFFSET ...")] = None,
    all_: Annotated[
        bool, typer.Option("--all", help="every letter (with --reason: those)")
    ] = False,
    reason: Annotated[str | None, typer.Option(help="only this reason code")] = None,
    as_json: JsonOption = False,
) -> None:
    """Republish the original bytes of letters to their source topics."""
    if not refs and not all_:
        fail(typer.BadParameter("name letters (PARTITION:OFFSET) or pass --all"), as_json)
    s = Settings()
    try:
        at = None if all_ else _refs(refs or [])
        letters = asyncio.run(_read(s.kafka_bootstrap, s.topic_dead_letter, at))
        letters = [x for x in letters if reason in (None, x.letter.reason_code)]
        if not letters:
            raise NotFound("no dead letters matched")
        done = asyncio.run(_republish(s.kafka_bootstrap, letters, progress=not as_json))
    except (typer.BadParameter, ContextError) as exc:
        fail(exc, as_json)
    data = {"ok": True, "replayed": done}
    show(as_json, data, lambda: out.print(f"[green]replayed[/] {len(done)} letters"))


class OriginalUnavailable(ContextError):
    code = "original_unavailable"


async def _original(bootstrap: str, d: DeadLetter) -> tuple[bytes | None, bytes]:
    """Key and value to republish: the letter's own, or (when cut) the source record."""
    cut = truncated_original(d)
    if cut is None:
        return d.key, d.value or b""
    found = await _source(bootstrap, d)
    if found is None or hashlib.sha256(found[1]).hexdigest() != cut[1]:
        raise OriginalUnavailable(
            f"the original of {d.source_topic}:{d.source_partition}:{d.source_offset}"
            " is no longer in its topic (retention) or differs from the recorded sha256",
            source_topic=d.source_topic,
        )
    return found


async def _source(bootstrap: str, d: DeadLetter) -> tuple[bytes | None, bytes] | None:
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **_auth())
    await c.start()
    try:
        tp = TopicPartition(d.source_topic, d.source_partition)
        c.assign([tp])
        c.seek(tp, d.source_offset)
        batch = await c.getmany(tp, timeout_ms=5000, max_records=1)
        for msg in batch.get(tp, []):
            if msg.offset == d.source_offset and msg.value is not None:
                return msg.key, msg.value
        return None
    finally:
        await c.stop()


async def _republish(bootstrap: str, letters: list[Letter], progress: bool) -> list[str]:
    # acks=all and idempotence: a replayed record is written once per send even if the
    # leader changes mid-send; consumers dedupe by event key anyway (R15.2).
    p = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, **_auth()
    )
    await p.start()
    done: list[str] = []
    try:
        with Progress(disable=not progress, transient=False) as bar:
            task = bar.add_task("replaying", total=len(letters))
            for x in letters:
                key, value = await _original(bootstrap, x.letter)
                await p.send_and_wait(x.letter.source_topic, value, key=key)
                done.append(x.ref)
                bar.advance(task)
    finally:
        await p.stop()
    return done
