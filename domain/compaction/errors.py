"""Errors of the compaction service, with stable codes (R15.3).

Their own module so that the drafts, the validator, the adapters and the gateway port
can all raise them without importing each other.
"""

from __future__ import annotations

from typing import Any

from schemas.errors import ContextError


class SummarizerFailed(ContextError):
    """The summarizer did not produce an answer (transport, provider or quota error).

    Retriable: the same request may succeed later; the job bounds how often (R15.3).
    """

    code = "summarizer_failed"
    retriable = True
    http_status = 502


class SummarizerTimeout(SummarizerFailed):
    """Every attempt ran past the adapter's time limit."""

    code = "summarizer_timeout"
    http_status = 504


class InvalidSummary(ContextError):
    """The summarizer answered, but the answer cannot become a summary (R11.4).

    ``details["reason"]`` is machine-readable: ``empty``, ``unknown_source_id``,
    ``source_out_of_range``, ``uncited``, ``empty_statement``, ``missing_field``,
    ``unparseable``, ``too_long``, ``plan_state_in_summary``. Not retriable as such: a
    repeat of the same request at temperature 0 tends to give the same answer, so the
    job decides whether a changed request (smaller segment, other adapter) is worth it.
    """

    code = "invalid_summary"
    http_status = 502

    def __init__(self, message: str, *, reason: str, **details: Any) -> None:
        super().__init__(message, reason=reason, **details)
        self.reason = reason
