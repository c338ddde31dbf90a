"""The event-outcome route (``Runs.outcome``, what the SDK's bus key check asks): an
append the processor commits while the route answers is never called ``not_applied``
(issue 37: a shared runtime's client checks one agent's append after another agent's
prepare, which did not wait for it, so the commit can land mid-answer)."""

from __future__ import annotations

from typing import Any, cast

from schemas.errors import NotCommittedYet
from services.prepare.run_lifecycle import Runs


class Db:
    """The processor commits the append right after the outcome lookup's snapshot."""

    def __init__(self) -> None:
        self.committed = False

    async def outcome(self, session_id: str, event_key: str) -> dict[str, Any] | None:
        found = {"outcome": "applied", "record_id": "r1"} if self.committed else None
        self.committed = True  # the commit lands just after this read
        return found

    async def wait(self, offsets: dict[int, int], timeout: float) -> None:
        if not self.committed:
            raise NotCommittedYet("not yet", offsets={}, waited_s=timeout)


def runs(db: Db) -> Runs:
    fields: dict[str, Any] = {
        "sessions": db, "releases": None, "publisher": None, "topic": "t", "waiter": db,
        "views": None, "commit_wait_s": 1.0,
    }  # fmt: skip
    return Runs(**cast(Any, fields))


async def test_a_commit_landing_mid_answer_is_unknown_then_applied() -> None:
    db = Db()
    first = await runs(db).outcome("s1", "q0", (0, 5))
    assert first == {"outcome": "unknown"}  # asked again later: never not_applied
    assert (await runs(db).outcome("s1", "q0", (0, 5)))["outcome"] == "applied"


async def test_passed_without_an_outcome_is_not_applied() -> None:
    db = Db()
    db.committed = True

    async def nothing(session_id: str, event_key: str) -> None:
        return None

    db.outcome = nothing  # type: ignore[method-assign,assignment]
    assert (await runs(db).outcome("s1", "q0", (0, 5)))["code"] == "not_applied"
