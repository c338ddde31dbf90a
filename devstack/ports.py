"""Ports for the services a test or a benchmark starts: free now, and likely to stay free
until the service binds them.

A port from binding port 0 is in the kernel's ephemeral range, where every outgoing
connection takes its local port: between the check and the service's own bind, a client
of another test worker (each opens dozens to Kafka and PostgreSQL) can take it, and the
service fails with "address already in use". Below that range only an explicit bind takes
a port, so that is where these are picked, at random, each checked free.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 20_000
_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux's default when unknown)."""
    try:
        return int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port(n: int = 1, host: str = "127.0.0.1") -> int:
    """The first of ``n`` consecutive ports free on ``host`` now, below the ephemeral
    range (anywhere free, by binding port 0, when the range leaves no room below it)."""
    top = ephemeral_start() - n
    picks = random.SystemRandom()
    for _ in range(200 if top > LOWEST else 0):
        base = picks.randrange(LOWEST, top)
        if all(_bindable(host, p) for p in range(base, base + n)):
            return base
    if n == 1:
        with socket.socket() as s:
            s.bind((host, 0))
            return int(s.getsockname()[1])
    raise OSError(f"no {n} consecutive free ports below {top + n} on {host}")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
