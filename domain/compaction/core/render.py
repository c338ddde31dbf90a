"""A summary revision's text, rendered once: the plan heading, then the draft's sections
(``SummaryDraft.text``). The bound holds the whole text (R11.2), so the draft's room is
the bound less the heading (``draft_room``)."""

from __future__ import annotations

from domain.compaction.core.job import CountFn
from domain.compaction.drafts import SummaryDraft
from domain.frontier import Plan


def summary_heading(plan: Plan) -> str:
    """The first line of a summary written while the thread had a plan: the whole summary
    — paraphrases and pronouns included — is dated to that plan version."""
    if not plan.version:
        return ""
    return (
        f"(written at plan v{plan.version}: what it says of plan items is history; the"
        " current plan is the plan block)"
    )


def render_summary(draft: SummaryDraft, plan: Plan) -> str:
    """The summary's text as the view shows it."""
    heading = summary_heading(plan)
    return f"{heading}\n{draft.text()}" if heading else draft.text()


def draft_room(bound: int, plan: Plan, count: CountFn) -> int:
    """The tokens the draft's sections may take within ``bound``, beside the heading."""
    heading = summary_heading(plan)
    return bound - (count(f"{heading}\n") if heading else 0)
