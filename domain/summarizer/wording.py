"""What a model summarizer says, in whichever provider format it speaks.

The words are the compaction service's (``services/compaction/openai_compat.py``: the
prompt of ``prompt.md`` with its answer schema, ``render_segment``,
``fork_instruction``), so every client asks for the same answer and it is read by the
same ``read_answer``. The compaction service's composition root hands them to each
client (``services/compaction/bootstrap.py`` ``make_gateway``): the clients in
``services.summarizers`` sit below ``services.compaction``, which wires them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from domain.compaction.drafts import SummaryRequest


@dataclass(frozen=True)
class Wording:
    """``system``: the system prompt of the summarizer's own request; ``segment``: its
    one user message, the segment's records rendered; ``instruction``: a forked call's
    final message, the prompt and an index of the segment's records by id."""

    system: str
    segment: Callable[[SummaryRequest], str]
    instruction: Callable[[SummaryRequest], str]
