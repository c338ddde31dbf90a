"""Authored records (issue 36): decisions and open questions stated explicitly, by the
host or by the model through its tools (``services.integrations.authored_tools``).

They stay in the thread's history (a short state note in the view) and every summary
keeps them as entries of their own, verbatim and cited (``domain.compaction.authored``);
a question stays open in the summaries until a ``close_question`` names its key.
"""

from __future__ import annotations

import hashlib
import uuid

from schemas.contracts import (
    Authority,
    Content,
    DecisionPayload,
    QuestionPayload,
    RecordKind,
)
from schemas.limits import MAX_KEY_LEN
from services.sdk.appends import EventAppends, RunHandle


class AuthoredAppends(EventAppends):
    """The decision and question appends of ``ContextClient``."""

    async def record_decision(
        self,
        run: RunHandle,
        text: str,
        reason: str | None = None,
        event_key: str | None = None,
        authority: Authority = Authority.HOST,
    ) -> tuple[int, int]:
        """A decision taken in ``run``'s thread (``text``, at most 4 KiB, and why). Pass
        ``event_key`` (e.g. the tool call's id) to make retries no-ops."""
        return await self.append(
            self._event(
                run,
                RecordKind.DECISION_RECORDED,
                authority,
                Content.text(text),
                DecisionPayload(reason),
                event_key or f"decision:{uuid.uuid4().hex}",
            )
        )

    async def open_question(
        self,
        run: RunHandle,
        text: str,
        event_key: str,
        authority: Authority = Authority.HOST,
    ) -> tuple[int, int]:
        """An open question of ``run``'s thread (at most 4 KiB). ``event_key`` is its
        identity: ``close_question`` names it (and a retried open is no second one)."""
        return await self.append(
            self._event(
                run,
                RecordKind.QUESTION_OPENED,
                authority,
                Content.text(text),
                QuestionPayload(event_key),
                event_key,
            )
        )

    async def close_question(
        self,
        run: RunHandle,
        question_key: str,
        answer: str | None = None,
        event_key: str | None = None,
        authority: Authority = Authority.HOST,
    ) -> tuple[int, int]:
        """The question opened with the key ``question_key`` is settled (``answer``, if
        any, at most 4 KiB): summaries list it as answered, no longer as open. The
        default key closes a question once (a retry is a duplicate)."""
        return await self.append(
            self._event(
                run,
                RecordKind.QUESTION_CLOSED,
                authority,
                Content.text(answer or ""),
                QuestionPayload(question_key, answer),
                event_key or _closing_key(question_key),
            )
        )


def _closing_key(question_key: str) -> str:
    """``close:<question key>``; a digest of it when that would be over the key limit."""
    key = f"close:{question_key}"
    if len(key) <= MAX_KEY_LEN:
        return key
    return f"close:sha256:{hashlib.sha256(question_key.encode()).hexdigest()}"
