"""A model summarizer's answer as a ``SummaryResult``, the same for every client: the text
read leniently (``domain.compaction.model_answer.read_answer``), what it left out logged
and counted, the call's usage and time."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from domain.compaction.drafts import SummaryRequest, SummaryResult
from domain.compaction.model_answer import read_answer
from domain.usage import Usage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelSummaryResult(SummaryResult):
    """A ``SummaryResult`` that also counts what ``read_answer`` left out of the model's
    answer, by reason (``uncited``, ``outside_segment``, ``trimmed`` …)."""

    dropped: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Caller:
    """Who answered: the client's adapter name, model and gen_ai provider name."""

    adapter: str
    model: str
    provider: str


def model_result(
    req: SummaryRequest,
    text: str,
    count: Callable[[str], int],
    usage: Usage | None,
    elapsed_ms: float,
    caller: Caller,
) -> ModelSummaryResult:
    """``text``, a model's answer to ``req``, as the job's result."""
    draft, dropped = read_answer(text, req, count)
    if dropped:
        log.info("summary %s: left out of the answer %s", req.model_operation_id, dropped)
    return ModelSummaryResult(
        draft=draft,
        model_operation_id=req.model_operation_id,
        input_tokens=usage.input_tokens if usage else 0,
        output_tokens=usage.output_tokens if usage else 0,
        elapsed_ms=elapsed_ms,
        adapter=caller.adapter,
        usage=usage,
        model=caller.model,
        provider=caller.provider,
        dropped=dropped,
    )
