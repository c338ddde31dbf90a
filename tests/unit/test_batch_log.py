"""The processor's per-batch line (``streams.crash_only.handle_or_exit``): a routine
batch — tens a second under load — at DEBUG, one that refused, dead-lettered or isolated
anything at INFO, where an operator looks."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from streams.admission import RawMessage
from streams.crash_only import handle_or_exit
from streams.processor import BatchResult


class Answering:
    def __init__(self, result: BatchResult) -> None:
        self.result = result

    async def handle(self, batch: list[Any], ahead: Any = None) -> BatchResult:
        return self.result


@pytest.mark.parametrize(
    ("result", "level"),
    [
        (BatchResult(committed=3, duplicates=1), logging.DEBUG),
        (BatchResult(committed=2, dead_letters=1), logging.INFO),
        (BatchResult(committed=2, rejected=1), logging.INFO),
        (BatchResult(isolated=1, dead_letters=1), logging.INFO),
    ],
)
async def test_a_routine_batch_is_logged_at_debug_a_notable_one_at_info(
    result: BatchResult, level: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="agentloom.processor")
    batch = [RawMessage(b"k", b"v", 0, n) for n in range(3)]
    assert await handle_or_exit(Answering(result), batch, 1.0) is result  # type: ignore[arg-type]
    [line] = [r for r in caplog.records if r.getMessage().startswith("batch of 3:")]
    assert line.levelno == level
