"""Unique, stable instance ids for static group membership (DESIGN.md).

Kafka's ``group.instance.id`` must be unique among the live members of a group: two
processes with the same id fence each other off, and the group flaps. It should also be
stable across a restart, so that a restarted process takes its partitions back at once
instead of waiting out a dead member's session.

Default: ``<hostname>-<role>-<n>``, where ``n`` is the lowest slot on this host whose lock
file (in the state dir) no live process holds. The lock is an ``flock`` held for the
process's life, so the kernel releases it when the process dies (even by kill -9): a
restarted process gets the same slot back, and a second process on the same host gets the
next one. An explicit id (``ALC_PROCESSOR_INSTANCE_ID``) overrides all of this.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

MAX_SLOTS = 1024
_held: list[IO[str]] = []  # open lock files: closing one would release its slot


def claim_instance_id(role: str, state_dir: Path, explicit: str | None = None) -> str:
    """The instance id of this process for ``role`` (``processor``, ``compaction``...)."""
    if explicit:
        return explicit
    host = socket.gethostname().split(".")[0] or "host"
    lock_dir = state_dir / "instances"
    lock_dir.mkdir(parents=True, exist_ok=True)
    for slot in range(1, MAX_SLOTS + 1):
        name = f"{host}-{role}-{slot}"
        handle = (lock_dir / f"{name}.lock").open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        _held.append(handle)
        log.info("instance id %s (slot lock %s)", name, handle.name)
        return name
    raise RuntimeError(f"no free {role} instance slot in {lock_dir} ({MAX_SLOTS} live?)")
