"""The SDK's check that the bus accepts its appends (issue 38, item 6): a client whose
appends the processor refused as unauthenticated raises ``bus_key_refused`` at the next
prepare (and at every append or prepare after it), never answers from a view without
them; a client whose append was applied is never asked about again."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.errors import ApiError
from services.sdk.key_check import BUS_KEY_REFUSED, CHECK_EVERY_S, BusKeyCheck

pytestmark = pytest.mark.spec("R15.4", "R16")


class Outcomes:
    """The event-outcome route, scripted: the answers in turn, and what it was asked."""

    def __init__(self, *answers: dict[str, Any]) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, str, int, int]] = []

    async def __call__(self, sid: str, key: str, partition: int, offset: int) -> dict[str, Any]:
        self.asked.append((sid, key, partition, offset))
        return self.answers.pop(0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


NOT_APPLIED = {"outcome": "dead_letter", "code": "not_applied", "message": "no signature"}


async def test_an_append_passed_unattributed_raises_at_the_prepare_and_after() -> None:
    route = Outcomes(NOT_APPLIED)
    check = BusKeyCheck(route, Clock())
    check.seen("s1")
    check.sent("s1", "q1", 2, 40)
    check.sent("s1", "q2", 2, 41)  # only the first unverified append is asked about
    with pytest.raises(ApiError) as raised:
        await check.after_prepare()
    assert raised.value.code == BUS_KEY_REFUSED
    assert "user key" in raised.value.message and "q1" in raised.value.message
    assert route.asked == [("s1", "q1", 2, 40)]
    for later in (check.before_append, check.after_prepare):  # latched: no more asking
        with pytest.raises(ApiError):
            await later()
    assert len(route.asked) == 1


async def test_a_recorded_authentication_refusal_raises_too() -> None:
    route = Outcomes({"outcome": "dead_letter", "code": "unauthenticated_event"})
    check = BusKeyCheck(route, Clock())
    check.seen("s1")
    check.sent("s1", "q1", 0, 1)
    with pytest.raises(ApiError):
        await check.after_prepare()


async def test_an_applied_append_verifies_the_key_for_good() -> None:
    route = Outcomes({"outcome": "committed", "record_id": "rec_1"})
    check = BusKeyCheck(route, Clock())
    check.seen("s1")
    check.sent("s1", "q1", 0, 1)
    await check.after_prepare()
    check.sent("s1", "q2", 0, 2)
    await check.after_prepare()
    await check.before_append()
    assert route.asked == [("s1", "q1", 0, 1)]


async def test_a_refusal_of_its_own_proves_the_signature_was_accepted() -> None:
    route = Outcomes({"outcome": "dead_letter", "code": "run_not_active"})
    check = BusKeyCheck(route, Clock())
    check.seen("s1")
    check.sent("s1", "late", 0, 1)
    await check.after_prepare()
    assert check.verified


async def test_before_an_append_it_asks_at_most_once_a_period_and_waits_for_unknown() -> None:
    clock = Clock()
    route = Outcomes({"outcome": "unknown"}, NOT_APPLIED)
    check = BusKeyCheck(route, clock)
    check.seen("s1")
    await check.before_append()  # nothing sent yet: nothing to ask
    check.sent("s1", "q1", 0, 1)
    await check.before_append()  # not processed yet: goes on
    clock.now += CHECK_EVERY_S / 2
    await check.before_append()  # too soon to ask again
    assert len(route.asked) == 1
    clock.now += CHECK_EVERY_S
    with pytest.raises(ApiError):
        await check.before_append()
    assert len(route.asked) == 2


async def test_a_session_the_key_cannot_read_is_skipped_not_raised() -> None:
    async def not_found(sid: str, key: str, partition: int, offset: int) -> dict[str, Any]:
        raise ApiError.of(404, "not_found", f"session {sid} not found", False)

    check = BusKeyCheck(not_found, Clock())
    check.seen("elsewhere")
    check.sent("elsewhere", "q1", 0, 1)
    await check.after_prepare()
    assert check.unchecked is None and not check.verified


async def test_an_append_to_a_session_not_seen_to_exist_is_not_asked_about() -> None:
    """It may have been refused because the session did not exist yet (opened after the
    append): that says nothing of the key."""
    route = Outcomes(NOT_APPLIED)
    check = BusKeyCheck(route, Clock())
    check.sent("opened-later", "early", 0, 1)
    await check.after_prepare()
    check.seen("opened-later")
    await check.after_prepare()
    assert route.asked == []
    check.sent("opened-later", "next", 0, 2)
    with pytest.raises(ApiError):
        await check.after_prepare()
