"""The summarizer port (R11.3) and its errors.

A compaction job asks a ``SummaryGateway`` for one segment at a time. Adapters never
offer tools and only ever run with ``purpose="compaction"`` (R11.3, R14: compaction goes
through the compaction model chain only). Errors carry stable codes so the job can
apply the failure matrix (R15.3) — keep the old view, record the stage, retry within
bounds — without parsing messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from schemas.errors import ContextError

if TYPE_CHECKING:  # contracts imports InvalidSummary from here; avoid the import cycle
    from services.compaction.contracts import SummaryRequest, SummaryResult


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


class SummaryGateway(Protocol):
    """Turns one bounded segment of source records into a summary draft.

    Implementations must not offer tools, must not write anything, and must raise
    ``SummarizerFailed``/``SummarizerTimeout`` or ``InvalidSummary`` rather than return
    a partial result. The caller validates the draft (``validate.validate_draft``)
    before composing a summary revision; adapters may validate earlier.
    """

    name: str

    async def summarize(self, req: SummaryRequest) -> SummaryResult:
        """Summarize ``req.segment``; the result cites only ids from that segment."""
        ...
