"""The faust driver's processor in a child process (``ALC_PROCESSOR_OFFLOAD``).

Why: faust's per-event stream machinery costs about as much CPU as everything our
processor does per event, and both ran on one event loop, so one core bounded the faust
driver at about half of what faust alone reads. Here the faust process only reads,
acknowledges and commits offsets; the ``BatchProcessor`` (decode, plan, PostgreSQL
transaction, publishes) runs in ``streams.drivers.worker`` on the other core, while faust keeps
reading (``streams.drivers.pipelined``).

Every guarantee stays where it was:
- offset order: batches reach the child in the order ``handle`` is called, and it
  applies them one after another (it only admits the next one's first chunk ahead);
- offsets after commit and publish: the child replies only after ``handle`` returned
  (the PostgreSQL commit and the acknowledged publishes), and the parent acks a batch's
  events only after its reply (``streams.drivers.pipelined``);
- crash-only: a child that dies or answers garbage makes this process exit at once
  (``exit_for_redelivery``) before anything more is acked, so the batch is redelivered
  on restart and redelivery is a no-op; a parent that dies takes the child with it
  (``PR_SET_PDEATHSIG``), so no child keeps writing for partitions the group gave to
  another processor.

The pipe carries frames: an 8-byte big-endian length and a ``marshal`` body of plain
tuples, ints, bytes and str (never objects: ``marshal`` builds no classes). The first
frame to the child is the settings as JSON.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import marshal
import os
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from schemas.settings import Settings
from streams.admission import RawMessage
from streams.crash_only import exit_for_redelivery
from streams.metrics import DEAD_LETTERS
from streams.processor import BatchResult

log = logging.getLogger("agentloom.processor")

_LEN = struct.Struct(">Q")
# Past any real batch (2,000 messages of Kafka's 1 MiB default are 2 GiB): a length this
# large is a torn or garbled pipe, not a batch to wait for.
MAX_FRAME = 1 << 34


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
    return marshal.dumps([(m.key, m.value, m.partition, m.offset, m.headers) for m in batch])


def decode_batch(body: bytes) -> list[RawMessage]:
    return [RawMessage(k, v, p, o, h) for k, v, p, o, h in marshal.loads(body)]


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
    """The faust agent's handle on its child processor. Batches go to the child in the
    order ``handle`` is called (the caller keeps offset order); the child applies them
    one after another and answers in the same order, so replies are matched first in,
    first out. More than one may be outstanding: the child then admits the next batch
    while it applies the current one."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._child: asyncio.subprocess.Process | None = None
        self._waiting: collections.deque[asyncio.Future[Reply]] = collections.deque()
        self._reader: asyncio.Task[None] | None = None
        self._lost: WorkerLost | None = None
        self._stopping = False

    async def start(self) -> None:
        self._child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "streams.drivers.worker",
            str(os.getpid()),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            # Its logs go where ours go.
            stderr=None,
        )
        log.info("processor worker started (pid %d)", self._child.pid)
        self._reader = asyncio.create_task(self._read_replies(self._child))
        self._write(self.settings.model_dump_json().encode())

    def _write(self, body: bytes) -> None:
        """Queue a frame on the child's pipe; frames keep the order of these calls."""
        if self._lost is not None:
            raise self._lost
        if self._child is None or self._child.stdin is None:
            raise WorkerLost("the worker was not started")
        self._child.stdin.write(frame(body))

    async def _read_replies(self, child: asyncio.subprocess.Process) -> None:
        assert child.stdout is not None
        try:
            while (body := await read_frame(child.stdout)) is not None:
                if not self._waiting:
                    raise WorkerLost("a reply nobody asked for")
                fut = self._waiting.popleft()
                if not fut.done():
                    fut.set_result(decode_reply(body))
            raise WorkerLost(f"the worker exited with code {await child.wait()}")
        except WorkerLost as exc:
            self._lose(exc)
        except Exception as exc:
            self._lose(WorkerLost(f"reading the worker's replies failed: {exc!r}"))
        if not self._stopping:
            # At once, not with the next batch for the child: small batches are applied
            # in this process (``streams.drivers.small_at_home``), and a backlog would
            # meet a dead child only after them.
            exit_for_redelivery(f"processor worker lost: {self._lost}")

    def _lose(self, exc: WorkerLost) -> None:
        self._lost = exc
        while self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():
                fut.set_exception(exc)

    async def handle(self, batch: list[RawMessage]) -> Reply:
        """Apply ``batch`` in the child; returns once it is committed and published.
        Raises ``WorkerLost`` when the child cannot have applied it."""
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        # Frame and waiter are queued together, with no await between: the order of the
        # calls is the order of the frames and of the replies.
        self._write(encode_batch(batch))
        self._waiting.append(fut)
        assert self._child is not None and self._child.stdin is not None
        try:
            await self._child.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            self._lose(WorkerLost(f"the worker's pipe is closed: {exc}"))
        return await fut

    async def stop(self) -> None:
        """Close the child's input (it exits after its batches) and wait for it."""
        self._stopping = True  # its end of input ends it: no loss
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
        if self._reader is not None:
            self._reader.cancel()


async def handle_offloaded_or_exit(worker: OffloadedProcessor, batch: list[RawMessage]) -> Reply:
    """``handle_or_exit`` for the offloaded processor: the child retries transient faults
    itself and exits past their bound; a lost child ends this process too, at once,
    before faust can ack the batch (see ``streams.crash_only.handle_or_exit``)."""
    try:
        reply = await worker.handle(batch)
    except WorkerLost:
        exit_for_redelivery("processor worker lost: exiting so that the batch is redelivered")
    for reason, n in reply.dead_letters.items():
        DEAD_LETTERS.labels(reason).inc(n)
    return reply


def settings_from(body: bytes) -> Settings:
    return Settings.model_validate_json(body)
