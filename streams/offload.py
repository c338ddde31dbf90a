"""The faust driver's processor in a child process (issue 13, ``ALC_PROCESSOR_OFFLOAD``).

Why: faust's per-event stream machinery costs about as much CPU as everything our
processor does per event, and both ran on one event loop, so one core bounded the faust
driver at about half of what faust alone reads. Here the faust process only reads,
acknowledges and commits offsets; the ``BatchProcessor`` (decode, plan, PostgreSQL
transaction, publishes) runs in ``streams.worker`` on the other core. faust keeps reading
the next batch into ``take_events``' buffer while the child applies the current one.

Every guarantee stays where it was:
- one batch at a time, in offset order: the agent awaits the child's reply before its
  loop body returns, i.e. before faust may ack the batch;
- offsets after commit and publish: the child replies only after ``handle`` returned
  (the PostgreSQL commit and the acknowledged publishes);
- crash-only: a child that dies or answers garbage makes this process exit at once
  (``CRASH_EXIT_CODE``) before faust can ack, so the batch is redelivered on restart and
  redelivery is a no-op; a parent that dies takes the child with it (``PR_SET_PDEATHSIG``),
  so no child keeps writing for partitions the group gave to another processor.

The pipe carries frames: a 4-byte big-endian length and a ``marshal`` body of plain
tuples, ints, bytes and str (never objects: ``marshal`` builds no classes). The first
frame to the child is the settings as JSON.
"""

from __future__ import annotations

import asyncio
import logging
import marshal
import os
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from schemas.settings import Settings
from streams.admission import RawMessage
from streams.metrics import DEAD_LETTERS
from streams.processor import CRASH_EXIT_CODE, BatchResult

log = logging.getLogger("agentloom.processor")

_LEN = struct.Struct(">I")
MAX_FRAME = 1 << 30  # a batch of 2,000 messages of 1 MiB is 2 GiB; far past any real one


class WorkerLost(RuntimeError):
    """The child process died, closed its pipe or answered something that is no reply."""

    code = "processor_worker_lost"


@dataclass(frozen=True)
class Reply:
    """What the child says of a handled batch: its result and the dead letters it sent by
    reason (counted into this process's ``/metrics``, where the operator looks)."""

    result: BatchResult
    dead_letters: Mapping[str, int] = field(default_factory=dict)


# ── frames (pure) ────────────────────────────────────────────────────────────────────


def frame(body: bytes) -> bytes:
    return _LEN.pack(len(body)) + body


def encode_batch(batch: list[RawMessage]) -> bytes:
    return marshal.dumps([(m.key, m.value, m.partition, m.offset) for m in batch])


def decode_batch(body: bytes) -> list[RawMessage]:
    return [RawMessage(k, v, p, o) for k, v, p, o in marshal.loads(body)]


def encode_reply(reply: Reply) -> bytes:
    r = reply.result
    return marshal.dumps(
        (
            r.committed,
            r.duplicates,
            r.dead_letters,
            r.rejected,
            r.isolated,
            dict(r.codes),
            dict(reply.dead_letters),
        )
    )


def decode_reply(body: bytes) -> Reply:
    try:
        committed, duplicates, dead, rejected, isolated, codes, reasons = marshal.loads(body)
        result = BatchResult(committed, duplicates, dead, rejected, isolated, dict(codes))
        return Reply(result, {str(k): int(n) for k, n in reasons.items()})
    except (ValueError, TypeError, EOFError) as exc:
        raise WorkerLost(f"not a worker reply: {exc}") from exc


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The next frame's body; ``None`` at a clean end of the stream (before a header)."""
    try:
        head = await reader.readexactly(_LEN.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise WorkerLost("the pipe closed inside a frame header") from exc
        return None
    (size,) = _LEN.unpack(head)
    if size > MAX_FRAME:
        raise WorkerLost(f"frame of {size} bytes announced")
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError as exc:
        raise WorkerLost("the pipe closed inside a frame") from exc


# ── the parent's side ────────────────────────────────────────────────────────────────


class OffloadedProcessor:
    """The faust agent's handle on its child processor: one batch in flight at a time."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._child: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        self._child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "streams.worker",
            str(os.getpid()),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            # Its logs go where ours go.
            stderr=None,
        )
        log.info("processor worker started (pid %d)", self._child.pid)
        await self._send(self.settings.model_dump_json().encode())

    async def _send(self, body: bytes) -> None:
        assert self._child is not None and self._child.stdin is not None
        self._child.stdin.write(frame(body))
        await self._child.stdin.drain()

    async def handle(self, batch: list[RawMessage]) -> Reply:
        """Apply ``batch`` in the child; returns once it is committed and published.
        Raises ``WorkerLost`` when the child cannot have applied it."""
        async with self._lock:
            child = self._child
            if child is None or child.stdout is None:
                raise WorkerLost("the worker was not started")
            try:
                await self._send(encode_batch(batch))
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise WorkerLost(f"the worker's pipe is closed: {exc}") from exc
            body = await read_frame(child.stdout)
            if body is None:
                code = await child.wait()
                raise WorkerLost(f"the worker exited with code {code}")
            return decode_reply(body)

    async def stop(self) -> None:
        """Close the child's input (it exits after its batch) and wait for it."""
        child, self._child = self._child, None
        if child is None:
            return
        if child.stdin is not None:
            child.stdin.close()
        try:
            await asyncio.wait_for(child.wait(), 10)
        except TimeoutError:
            child.kill()
            await child.wait()


async def handle_offloaded_or_exit(worker: OffloadedProcessor, batch: list[RawMessage]) -> Reply:
    """``handle_or_exit`` for the offloaded processor: the child retries transient faults
    itself and exits past their bound; a lost child ends this process too, at once,
    before faust can ack the batch (see ``streams.processor.handle_or_exit``)."""
    try:
        reply = await worker.handle(batch)
    except WorkerLost:
        log.critical(
            "processor worker lost: exiting so that the batch is redelivered", exc_info=True
        )
        logging.shutdown()
        os._exit(CRASH_EXIT_CODE)
    for reason, n in reply.dead_letters.items():
        DEAD_LETTERS.labels(reason).inc(n)
    return reply


def settings_from(body: bytes) -> Settings:
    return Settings.model_validate_json(body)
