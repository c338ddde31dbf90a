"""Conftest for the openai-agents sdist's own session tests (``make peer-tests``, copied
next to their renamed ``agents_tests`` package by deploy/peer-tests.sh): every
``SQLiteSession(session_id, db_path, ...)`` the tests make is an ``AgentLoomSession`` on
the real stack (our fixtures: Kafka, PostgreSQL, processor, Prepare, compaction).

Tests of SQLite's own machinery (its files, connections, threads, locks, corrupt rows,
rollbacks) do not apply; they are deselected here with the reason, and the rest must
pass — ``pop_item``'s among them (a retraction event since issue 15).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from agents.memory.session_settings import SessionSettings

from services.integrations.connection import AgentLoomConnection
from services.integrations.openai_agents import AgentLoomSession
from tests.conftest import pg_dsn, services, stack  # noqa: F401  (our real-stack fixtures)
from tests.peer.shared import agentloom, deselect_not_applicable  # noqa: F401  (a fixture)

NOT_APPLICABLE = {
    # SQLite internals: per-thread connections, file locks, corrupt JSON rows, rollback.
    "sqlite": "tests SQLiteSession's own storage (connections, files, locks, corrupt rows)",
    "_mutation": "tests the SDK's internal mutation helper, not a session",
    "closed_rejects": "SQLiteSession.close() semantics (our close() leaves a shared link)",
    "file_lock": "SQLite file locks",
    "rollback": "SQLite transactions",
    "post_commit_cancellation": "SQLite write-lock cancellation internals",
    "exception_propagates": "patches SQLiteSession internals to fail",
    "settings_rejects_unknown": "SQLiteSession's own settings coercion",
}


def _reason(name: str) -> str | None:
    applies = (
        "memory_direct",
        "get_items_with_limit",
        "unicode",
        "special_char",
        "concurrent",
        "memory_pop",  # pop_item records a retraction (issue 15)
    )
    if any(a in name for a in applies) and "corrupt" not in name:
        return None  # direct add/get/clear, limits, text and concurrency: ours must pass
    for marker, why in NOT_APPLICABLE.items():
        if marker in name:
            return why
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect_not_applicable(config, items, "openai-agents", lambda item: _reason(item.name))


@pytest.fixture(autouse=True)
def _sessions_are_ours(
    request: pytest.FixtureRequest,
    agentloom: AgentLoomConnection,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tag = uuid.uuid4().hex[:8]  # a fresh namespace per test: their ids repeat across tests

    def session(
        session_id: str,
        db_path: Any = ":memory:",
        *_: Any,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        **__: Any,
    ) -> AgentLoomSession:
        settings = (
            SessionSettings(**session_settings)
            if isinstance(session_settings, dict)
            else session_settings
        )
        return AgentLoomSession(
            f"{tag}-{session_id}", connection=agentloom, session_settings=settings
        )

    if hasattr(request.module, "SQLiteSession"):
        monkeypatch.setattr(request.module, "SQLiteSession", session)
