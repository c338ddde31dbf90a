"""``devstack.ports``: the ports the tests and benchmarks start services on are picked
below the kernel's ephemeral range, where no outgoing connection takes one."""

from __future__ import annotations

import socket

import pytest

from devstack import ports


def test_a_block_of_ports_is_free_and_below_the_ephemeral_range() -> None:
    base = ports.free_port(3)
    assert base >= ports.LOWEST and base + 3 <= ports.ephemeral_start()
    held = []
    try:
        for p in range(base, base + 3):  # each one can be bound now
            s = socket.socket()
            held.append(s)
            s.bind(("127.0.0.1", p))
    finally:
        for s in held:
            s.close()


def test_a_port_in_use_is_never_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    picks = iter([ports.LOWEST, ports.LOWEST + 1])
    monkeypatch.setattr(ports.random.SystemRandom, "randrange", lambda self, a, b: next(picks))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", ports.LOWEST))
        assert ports.free_port() == ports.LOWEST + 1
