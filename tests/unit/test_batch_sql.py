"""``storage.records.batch_sql``: a batch's one statement, whatever parts it has, numbers
its arguments ``$1``..``$n`` without a gap (PostgreSQL refuses a statement with an
unused number: it cannot type it), in the order ``ingest._write_batch`` passes them."""

from __future__ import annotations

import itertools
import re

import pytest

from domain.record_rows import RECORD_COLUMNS
from storage.records import batch_sql


def _numbers(sql: str) -> set[int]:
    return {int(n) for n in re.findall(r"\$(\d+)", sql)}


@pytest.mark.spec("R15.2")
@pytest.mark.parametrize("parts", list(itertools.product((False, True), repeat=4)))
def test_every_combination_numbers_its_arguments_without_a_gap(
    parts: tuple[bool, bool, bool, bool],
) -> None:
    records, new_runs, changes, offsets = parts
    expected = (
        12
        + len(RECORD_COLUMNS) * records
        + batch_sql.NEW_RUN_ARGS * new_runs
        + batch_sql.CHANGE_ARGS * changes
        + batch_sql.TRACKING_ARGS * offsets
    )
    sql = batch_sql.batch_sql(*parts)
    assert _numbers(sql) == set(range(1, expected + 1))
    assert ("pg_notify" in sql) is offsets
    assert ("INSERT INTO runs" in sql) is new_runs and ("UPDATE runs" in sql) is changes


def test_a_part_alone_starts_at_one() -> None:
    for cte, n in ((batch_sql.new_runs_cte, 8), (batch_sql.changes_cte, 7)):
        assert _numbers(batch_sql.alone(cte(1))) == set(range(1, n + 1))
    assert _numbers("WITH" + batch_sql.tracked(1)) == set(range(1, 7))
