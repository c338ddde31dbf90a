"""What the peer shims share (``make peer-tests``): one ``AgentLoomConnection`` to our
services on the real stack for the whole run, and the rule for tests that do not apply —
deselected with their reason, printed, and listed in
``build/test-results/peer-<name>-na.tsv`` (file, test, reason) for the per-file summary
(tests/peer/summary.py). Everything else the peer ships in the chosen files must pass."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.integrations.connection import AgentLoomConnection
from tests.support.harness import connected
from tests.support.services import Services

RESULTS = Path(__file__).resolve().parents[2] / "build" / "test-results"


def na_path(peer: str) -> Path:
    return RESULTS / f"peer-{peer}-na.tsv"


def deselect_not_applicable(
    config: pytest.Config,
    items: list[pytest.Item],
    peer: str,
    reason: Callable[[pytest.Item], str | None],
) -> None:
    """Keeps the items whose ``reason`` is None; the others are deselected and recorded."""
    keep, drop, rows = [], [], []
    for item in items:
        why = reason(item)
        if why:
            drop.append(item)
            rows.append(f"{item.nodeid.split('::')[0]}\t{item.name}\t{why}\n")
            print(f"[peer] not applicable: {item.name}: {why}")
        else:
            keep.append(item)
    RESULTS.mkdir(parents=True, exist_ok=True)
    na_path(peer).write_text("".join(rows), "utf-8")
    config.hook.pytest_deselected(items=drop)
    items[:] = keep


@pytest.fixture(scope="session")
def agentloom(services: Services) -> Iterator[AgentLoomConnection]:
    """Our services (tests/conftest.py: the stack named by ALC_TEST_* or one it starts)."""
    with connected(services) as conn:
        yield conn
