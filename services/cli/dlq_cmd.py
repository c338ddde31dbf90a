"""``agentloom dlq list|show|replay``: the dead-letter topic (schemas/wire.py DeadLetter).

A letter carries the original key and value bytes, its source topic, partition and
offset, and the reason code. ``replay`` trusts none of it: it republishes the original
as the records topic holds it, only when the letter's bytes are that original's and the
original is a context event with an envelope, only when the processor will apply it (not
a duplicate it would ignore), then reads back what the processor did; every letter is
audited (``services.cli.dlq_replay``, ``services.cli.dlq_verdict``).
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from aiokafka import AIOKafkaConsumer, TopicPartition
from rich.table import Table

from schemas.errors import ContextError, NotFound, NotGranted
from schemas.settings import Settings
from schemas.wire import DeadLetter, decode_dead_letter, truncated_original
from services.cli import dlq_replay
from services.cli.output import ERROR, JsonOption, err, fail, out, show
from streams.kafka.auth import kafka_auth

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
    """The CLI's broker principal (``cli``: streams.kafka.auth)."""
    return kafka_auth(Settings(), "cli").client_kwargs()


async def _read(
    bootstrap: str, topic: str, start: dict[int, list[int]] | None = None
) -> list[Letter]:
    """Every letter now in ``topic`` (or the ones at ``start``: partition -> offsets)."""
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
            # (from, to): the whole partition, or each named offset alone.
            spans = (
                [(firsts[tp], ends[tp])]
                if start is None
                else [(o, o + 1) for o in start.get(tp.partition, ()) if o >= firsts[tp]]
            )
            for lo, hi in spans:
                if lo < ends[tp]:
                    c.seek(tp, lo)
                    letters += await _drain(c, tp, lo, min(hi, ends[tp]))
        return sorted(letters, key=lambda x: (x.letter.failed_at_ms, x.partition, x.offset))
    finally:
        await c.stop()


async def _partitions(c: AIOKafkaConsumer, topic: str) -> set[int]:
    await c._client.force_metadata_update()  # the topic may be unknown to a fresh client
    if topic in c._client.cluster.unauthorized_topics:
        raise NotGranted(
            f"the broker does not let this principal read {topic} (ACLs: streams.kafka.provision)",
            topic=topic,
        )
    return c.partitions_for_topic(topic) or set()


async def _drain(c: AIOKafkaConsumer, tp: TopicPartition, lo: int, end: int) -> list[Letter]:
    out_: list[Letter] = []
    while (await c.position(tp)) < end:
        batch = await c.getmany(tp, timeout_ms=2000)
        for msg in batch.get(tp, []):
            if not lo <= msg.offset < end or msg.value is None:
                continue
            try:
                out_.append(Letter(tp.partition, msg.offset, decode_dead_letter(msg.value)))
            except Exception as exc:  # not a dead letter at all: reported, never fatal
                err.print(f"[yellow]skipped[/] {tp.partition}:{msg.offset}: not a letter ({exc})")
    return out_


def _refs(refs: list[str]) -> dict[int, list[int]]:
    res: dict[int, list[int]] = {}
    for r in refs:
        p, _, o = r.partition(":")
        if not (p.isdigit() and o.isdigit()):
            raise typer.BadParameter(f"{r!r}: expected PARTITION:OFFSET (as dlq list prints)")
        if int(o) not in res.setdefault(int(p), []):
            res[int(p)].append(int(o))
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
    """Republish the originals of letters to the records topic: only letters whose bytes
    are the original's there, only context events the processor will apply (a duplicate
    it would ignore is skipped, and why is said), and read back what it did
    (services/cli/dlq_replay.py); each letter reported and audited. Exit 1 unless every
    letter was replayed and applied."""
    if not refs and not all_:
        fail(typer.BadParameter("name letters (PARTITION:OFFSET) or pass --all"), as_json)
    s = Settings()
    try:
        at = None if all_ else _refs(refs or [])
        letters = asyncio.run(_read(s.kafka_bootstrap, s.topic_dead_letter, at))
        letters = [x for x in letters if reason in (None, x.letter.reason_code)]
        if not letters:
            raise NotFound("no dead letters matched")
        replay_id, who, results = asyncio.run(dlq_replay.replay(s, list(letters)))
    except (typer.BadParameter, ContextError, OSError) as exc:
        fail(exc, as_json)
    done = [r.ref for r in results if r.outcome == "replayed"]
    data = {
        "ok": all(r.applied for r in results),
        "replay_id": replay_id,
        "operator": who.__dict__,
        "replayed": done,
        "results": [r.wire() for r in results],
    }

    def render() -> None:
        t = Table(title=f"replay {replay_id} by {who.os_user} as {who.principal}@{who.host}")
        for c in ("ref", "outcome", "code", "source", "expected", "detail", "verified"):
            t.add_column(c)
        for r in results:
            t.add_row(
                r.ref, r.outcome, r.code or "", r.source, r.expected or "", r.detail,
                r.verified or "",
            )  # fmt: skip
        out.print(t)
        applied = sum(r.applied for r in results)
        out.print(f"replayed {len(done)} of {len(results)} letters, {applied} applied")

    show(as_json, data, render)
    if not data["ok"]:
        raise typer.Exit(ERROR)
