"""A prepare waits for its own session's appends only (issue 37): ``EventBus.after``."""

from __future__ import annotations

import pytest

from services import bus
from services.bus import EventBus


def a_bus() -> EventBus:
    b = EventBus.__new__(EventBus)  # no broker: only the offsets are exercised
    b.last_offsets, b._sessions = {}, bus.OrderedDict()
    return b


def test_a_prepare_waits_for_its_own_sessions_last_append_only() -> None:
    b = a_bus()
    b._remember("s-a", 0, 5)
    b._remember("s-b", 1, 9)
    b._remember("s-a", 0, 7)
    b._remember("s-c", 0, 8)  # another session on A's partition, later
    assert b.after("s-a") == {"0": 7}
    assert b.after("s-b") == {"1": 9}
    # A session this bus never appended to waits for every partition, as before.
    assert b.after("s-new") == {"0": 8, "1": 9}


def test_a_forgotten_session_falls_back_to_every_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bus, "SESSIONS_REMEMBERED", 2)
    b = a_bus()
    b._remember("s-a", 0, 1)
    b._remember("s-b", 1, 2)
    b._remember("s-c", 2, 3)
    assert b.after("s-a") == {"0": 1, "1": 2, "2": 3}  # evicted: the safe superset
    assert b.after("s-c") == {"2": 3}
