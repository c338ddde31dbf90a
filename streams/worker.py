"""``python -m streams.worker PARENT_PID``: the faust driver's offloaded processor (see
``streams.offload``). Reads the settings, then batches, from stdin; answers each batch on
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

from streams.offload import Reply, decode_batch, encode_reply, frame, read_frame, settings_from
from streams.processor import handle_or_exit

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
    # Imported here: the composition root imports this package's faust side too.
    from streams.bootstrap import build_processor, open_pool
    from streams.metrics import MeteredPublisher
    from streams.publish import AiokafkaPublisher

    first = await read_frame(reader)
    if first is None:
        return
    settings = settings_from(first)
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    pool = await open_pool(settings)
    publisher = AiokafkaPublisher(settings.kafka_bootstrap)
    await publisher.start()
    proc = build_processor(settings, pool, publisher)
    assert isinstance(proc.publisher, MeteredPublisher)
    tally = proc.publisher.tally
    out = sys.stdout.buffer
    try:
        while (body := await read_frame(reader)) is not None:
            result = await handle_or_exit(
                proc, decode_batch(body), settings.processor_transient_retry_s
            )
            reply = Reply(result, dict(tally))
            tally.clear()
            # A small reply to a pipe the parent is reading: the blocking write is fine.
            out.write(frame(encode_reply(reply)))
            out.flush()
    finally:
        await publisher.stop()
        await pool.close()


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
    asyncio.run(main_async())


if __name__ == "__main__":
    main()
