"""``python -m streams.drivers.worker PARENT_PID``: the faust driver's offloaded processor (see
``streams.drivers.offload``). Reads the settings, then batches, from stdin; answers each batch on
stdout once it is committed and published; exits at the end of its input, with its
parent (``PR_SET_PDEATHSIG``), or — like any processor — with ``CRASH_EXIT_CODE`` when
the infrastructure stays lost (``handle_or_exit``).

It publishes through an aiokafka producer of its own (idempotent, ``acks=all``): the
parent's faust producer lives in another process.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import sys

import uvloop

from streams.admission import Admitted, RawMessage
from streams.crash_only import handle_or_exit
from streams.drivers.offload import (
    Reply,
    decode_batch,
    encode_reply,
    frame,
    read_frame,
    settings_from,
)
from streams.kafka.auth import kafka_auth
from streams.kafka.publish import AiokafkaPublisher
from streams.metrics import MeteredPublisher
from streams.processor import BatchProcessor
from streams.tuning.collector import tune_collector
from streams.wiring import build_processor, open_pool

log = logging.getLogger("agentloom.processor")

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies (Linux); exit now if it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the closed pipe still ends us
        log.warning("PR_SET_PDEATHSIG unavailable: the worker outlives a killed parent")
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


async def serve(reader: asyncio.StreamReader) -> None:
    first = await read_frame(reader)
    if first is None:
        return
    settings = settings_from(first)
    tune_collector(settings.gc_young_threshold)
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    pool = await open_pool(settings)
    publisher = AiokafkaPublisher(settings.kafka_bootstrap, kafka_auth(settings, "processor"))
    await publisher.start()
    proc = build_processor(settings, pool, publisher)
    assert isinstance(proc.publisher, MeteredPublisher)
    tally = proc.publisher.tally
    out = sys.stdout.buffer
    batches: asyncio.Queue[list[RawMessage] | None] = asyncio.Queue()
    reading = asyncio.create_task(_read_all(reader, batches))
    try:
        batch = await batches.get()
        ahead: Admitted | None = None
        while batch is not None:
            handling = asyncio.create_task(
                handle_or_exit(proc, batch, settings.processor_transient_retry_s, ahead=ahead)
            )
            # Read one batch ahead: if the next arrives while this one applies, admit its
            # first chunk (decode, validate, count: CPU) while this one's transactions
            # and publishes wait on PostgreSQL and the broker.
            getting = asyncio.create_task(batches.get())
            await asyncio.wait({handling, getting}, return_when=asyncio.FIRST_COMPLETED)
            ahead = None
            if getting.done() and not handling.done() and (nxt := getting.result()):
                ahead = await _admit_ahead(proc, nxt)
            result = await handling
            reply = Reply(result, dict(tally))
            tally.clear()
            # A small reply to a pipe the parent is reading: the blocking write is fine.
            out.write(frame(encode_reply(reply)))
            out.flush()
            batch = await getting
    finally:
        reading.cancel()
        await publisher.stop()
        await pool.close()


async def _read_all(
    reader: asyncio.StreamReader, batches: asyncio.Queue[list[RawMessage] | None]
) -> None:
    """Batches from the parent into ``batches``, then ``None`` at the end of its input."""
    try:
        while (body := await read_frame(reader)) is not None:
            batches.put_nowait(decode_batch(body))
    finally:
        batches.put_nowait(None)


async def _admit_ahead(proc: BatchProcessor, batch: list[RawMessage]) -> Admitted | None:
    """``proc.admit_ahead``, or nothing when it fails: the batch then admits its first
    chunk itself, under ``handle_or_exit``'s retries."""
    try:
        return await proc.admit_ahead(batch)
    except Exception:
        log.warning(
            "admitting the next batch ahead failed; it admits when it applies", exc_info=True
        )
        return None


async def main_async() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await serve(reader)


def main() -> None:
    die_with_parent(int(sys.argv[1]))
    # SIGTERM/SIGINT go to the whole process group (a terminal's ^C, the launcher's
    # stop): the parent decides when we end, by closing our input or by dying.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    uvloop.run(main_async())


if __name__ == "__main__":
    main()
