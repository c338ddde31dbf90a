"""Whether the bus accepts a client's appends: the SDK's answer to a key the processor
refuses (a user key, a revoked key, another deployment's key).

Appends go over Kafka and HTTP calls to Prepare; a key the processor refuses still
passes every HTTP call, so without this check ``prepare`` would answer from a view
without the appends. Until one append of the client is known applied (or refused for a
reason of its own, which proves its signature was accepted), the client asks what
became of its first unchecked append (``GET /v1/sessions/{s}/events/{key}`` with the
append's partition and offset) — an append to a session the client saw exist (it
opened it, or started or resumed a run in it: never one refused because the session
did not exist yet) — after each ``prepare``, which waited until the
processor passed the client's appends, so the answer is final — and before an append
at most once per ``CHECK_EVERY_S``. A refusal as unauthenticated (recorded, or an append
the processor passed without attributing it to the session: ``not_applied``) raises
``ApiError`` ``bus_key_refused`` then and at every later append or prepare. Once
verified, nothing more is asked: a key revoked later fails its next HTTP call (401).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from domain.context.envelope import UNAUTHENTICATED
from schemas.errors import ApiError

BUS_KEY_REFUSED = "bus_key_refused"
NOT_APPLIED = "not_applied"  # the event-outcome route's code (services.prepare.run_lifecycle)
CHECK_EVERY_S = 1.0  # the fewest seconds between two checks made before appends
MAX_SESSIONS = 10_000  # sessions remembered as existing until the key is verified

# (session_id, event_key, partition, offset) -> the event-outcome route's answer
Ask = Callable[[str, str, int, int], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Sent:
    """An append of this client not known applied yet, and where it was written."""

    session_id: str
    event_key: str
    partition: int
    offset: int


class BusKeyCheck:
    """The state of the check for one client (``ContextClient``)."""

    def __init__(self, ask: Ask, clock: Callable[[], float] = time.monotonic) -> None:
        self.ask = ask
        self.clock = clock
        self.verified = False
        self.refused: ApiError | None = None
        self.unchecked: Sent | None = None
        self.sessions: set[str] = set()  # sessions the client saw exist
        self._asked_at = float("-inf")

    def seen(self, session_id: str) -> None:
        """The session exists (the client opened it or ran in it)."""
        if not self.verified:
            if len(self.sessions) >= MAX_SESSIONS:
                self.sessions.clear()
            self.sessions.add(session_id)

    def sent(self, session_id: str, event_key: str, partition: int, offset: int) -> None:
        """An append was written: the first to a session seen to exist, while none is
        verified, is checked."""
        if not self.verified and self.unchecked is None and session_id in self.sessions:
            self.unchecked = Sent(session_id, event_key, partition, offset)

    async def before_append(self) -> None:
        """Raise when the bus refused this client's appends."""
        if self.refused is not None:
            raise self.refused
        if self.unchecked is not None and self.clock() - self._asked_at >= CHECK_EVERY_S:
            await self._check()

    async def after_prepare(self) -> None:
        """Raise when the bus refused the appends the prepare waited for."""
        if self.refused is not None:
            raise self.refused
        if self.unchecked is not None:
            await self._check()

    async def _check(self) -> None:
        s = self.unchecked
        assert s is not None
        self._asked_at = self.clock()
        try:
            answer = await self.ask(s.session_id, s.event_key, s.partition, s.offset)
        except ApiError as exc:
            if exc.code not in ("not_found", "not_granted"):
                raise
            self.unchecked = None  # a session this key cannot read: check a later append
            return
        outcome, code = answer.get("outcome"), answer.get("code")
        if outcome == "unknown":
            return  # not processed yet: asked again later
        if outcome in ("dead_letter", "rejected") and code in (UNAUTHENTICATED, NOT_APPLIED):
            self.refused = ApiError.of(
                0,
                BUS_KEY_REFUSED,
                f"the bus refused this client's appends (event {s.event_key} of session"
                f" {s.session_id}: {code}): they are not in any context. Sign appends with"
                " a live host key of the session's space (a user key reads and prepares but"
                f" never appends). {answer.get('message') or ''}".strip(),
                False,
            )
            raise self.refused
        self.verified, self.unchecked = True, None
