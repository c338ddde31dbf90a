"""A no-op faust agent: the read rate of the framework alone, the faust driver's ceiling.

``python -m benchmarks.noop_faust --topic T --count N`` consumes ``N`` messages of topic
``T`` the way the processor's faust agent does (``take_events`` batches of
``ALC_PROCESSOR_BATCH_MAX``, ``concurrency=1``, acks=all producer, same commit settings),
does nothing with them, and prints one JSON line: events, seconds (first batch to last,
start-up excluded) and events/s. ``benchmarks.run`` compares the faust driver with it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from typing import Any

import faust

from schemas.settings import Settings
from streams.kafka.auth import kafka_auth


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--count", type=int, required=True)
    args = ap.parse_args()
    s = Settings()
    app = faust.App(
        f"bench-noop-{uuid.uuid4().hex[:6]}",
        broker=f"kafka://{s.kafka_bootstrap}",
        # The local broker is SASL: a tool with its own group name connects as admin.
        broker_credentials=kafka_auth(s, "admin").faust_credentials(),
        store="memory://",
        value_serializer="raw",
        key_serializer="raw",
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        datadir=tempfile.mkdtemp(prefix="alc-noop-faust-"),
        broker_commit_every=s.processor_batch_max,
        broker_commit_interval=0.5,
    )
    topic = app.topic(args.topic, value_type=bytes, key_type=bytes)
    seen: list[Any] = [0, 0.0, 0]  # events, time of the first batch, its size

    @app.agent(topic, concurrency=1)
    async def noop(stream: Any) -> None:
        async for events in stream.take_events(
            s.processor_batch_max, within=s.processor_batch_within_s
        ):
            if seen[0] == 0:
                seen[1], seen[2] = time.perf_counter(), len(events)
            seen[0] += len(events)
            if seen[0] >= args.count:
                took = time.perf_counter() - seen[1]
                # The first batch's own read is not timed: count it out of the rate.
                rate = (seen[0] - seen[2]) / took if took > 0 else 0.0
                out = {"events": seen[0], "seconds": round(took, 3), "events_per_s": round(rate)}
                print(json.dumps(out), flush=True)
                os._exit(0)  # faust's shutdown takes seconds and measures nothing

    sys.argv = [sys.argv[0], "worker", "-l", "warn"]
    app.main()


if __name__ == "__main__":
    main()
