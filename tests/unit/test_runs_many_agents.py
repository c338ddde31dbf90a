"""``Runs`` under many agents (issue 37). The event-outcome route (``Runs.outcome``, what
the SDK's bus key check asks): an append the processor commits while the route answers
is never called ``not_applied`` (a shared runtime's client checks one agent's append
after another agent's prepare, which did not wait for it, so the commit can land
mid-answer). A session's identity is read once for all its runs' starts and finishes."""

from __future__ import annotations

from typing import Any, cast

import pytest

from schemas.answers.sessions import EventOutcome, Session
from schemas.errors import NotCommittedYet, NotFound
from services.prepare.run_lifecycle import Identity, Runs


class Db:
    """The processor commits the append right after the outcome lookup's snapshot."""

    def __init__(self) -> None:
        self.committed = False

    async def outcome(self, session_id: str, event_key: str) -> EventOutcome | None:
        found = EventOutcome(outcome="applied", record_id="r1") if self.committed else None
        self.committed = True  # the commit lands just after this read
        return found

    async def wait(self, offsets: dict[int, int], timeout: float) -> None:
        if not self.committed:
            raise NotCommittedYet("not yet", offsets={}, waited_s=timeout)


def runs(db: Any) -> Runs:
    fields: dict[str, Any] = {
        "sessions": db, "releases": None, "publisher": None, "topic": "t", "waiter": db,
        "views": None, "commit_wait_s": 1.0,
    }  # fmt: skip
    return Runs(**cast(Any, fields))


async def test_a_commit_landing_mid_answer_is_unknown_then_applied() -> None:
    db = Db()
    first = await runs(db).outcome("s1", "q0", (0, 5))
    assert first == EventOutcome(outcome="unknown")  # asked again later: never not_applied
    assert (await runs(db).outcome("s1", "q0", (0, 5))).outcome == "applied"


async def test_passed_without_an_outcome_is_not_applied() -> None:
    db = Db()
    db.committed = True

    async def nothing(session_id: str, event_key: str) -> None:
        return None

    db.outcome = nothing  # type: ignore[method-assign,assignment]
    assert (await runs(db).outcome("s1", "q0", (0, 5))).code == "not_applied"


class Rows:
    """``sessions.get`` and how often it was read."""

    def __init__(self) -> None:
        self.gets = 0

    async def get(self, sid: str) -> Session | None:
        self.gets += 1
        if sid != "s1":
            return None
        return Session(
            session_id="s1",
            space_id="sp",
            actor_id="alice",
            release_id="rel1",
            active_run_id="run1",
            revision=3,
            user_turns=1,
            model_steps=2,
            last_sequence=9,
        )


async def test_a_session_identity_is_read_once() -> None:
    rows = Rows()
    r = runs(cast(Any, rows))
    assert await r.identity("s1") == Identity("sp", "alice", "rel1")
    assert await r.identity("s1") == Identity("sp", "alice", "rel1")
    assert rows.gets == 1  # a start and a finish of its runs read no session row
    with pytest.raises(NotFound):
        await r.identity("nope")
