"""The summarizer port (R11.3); its errors are in ``errors``.

A compaction job asks a ``SummaryGateway`` for one segment at a time. Adapters never
offer tools and only ever run with ``purpose="compaction"`` (R11.3, R14: compaction goes
through the compaction model chain only). Errors carry stable codes so the job can
apply the failure matrix (R15.3) — keep the old view, record the stage, retry within
bounds — without parsing messages.
"""

from __future__ import annotations

from typing import Protocol

from domain.compaction.drafts import SummaryRequest, SummaryResult


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
