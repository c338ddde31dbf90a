"""What a PreparedContext answers beside its assembly (R4, R10.3): the ``read_content``
tool offered when a result was externalized, and the blocks' decisions as answered —
assembly's, then the view's (externalized results, the summary shown)."""

from __future__ import annotations

from typing import Any, cast

from domain.context.rendering import ThreadRenderer
from schemas.answers.prepared import Decision
from services.prepare.assembly.compaction_check import Lineage

# R10.3: offered to the model when something was externalized; the runtime executes it with
# ``ContextClient.read_content`` (scope-checked, paged).
READ_CONTENT_TOOL: dict[str, Any] = {
    "name": "read_content",
    "description": "Read part of a result that was shown truncated. ref is the reference"
    " given in the truncation note; offset and limit are in characters.",
    "parameters": {
        "type": "object",
        "properties": {
            "ref": {"type": "string"},
            "offset": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1, "maximum": 65536},
        },
        "required": ["ref"],
    },
}


def assembly_decisions(made: list[dict[str, Any]]) -> list[Decision]:
    """Assembly's decisions as the answer's: ``domain.context`` builds each with a
    ``block_id`` and a ``decision`` (and a reason, or more), the shape ``Decision``
    declares."""
    return cast(list[Decision], made)


def view_decisions(rend: ThreadRenderer, lineage: Lineage) -> list[Decision]:
    """What the view did beyond assembly: externalized results, the summary shown."""
    out = [
        Decision(block_id=f"rec:{r}", decision="externalized", reason="large_result_view")
        for r in rend.externalized
    ]
    if lineage.summary:
        shown = Decision(
            block_id=f"summary:{lineage.summary.summary_id}",
            decision="summarized",
            reason="covered_by_summary",
        )
        shown["records"] = len(lineage.summary.covered)  # type: ignore[typeddict-unknown-key]
        out.append(shown)
    return out
