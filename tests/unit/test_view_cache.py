"""The processor's main views kept between batches (issue 37,
``storage.compaction.view_cache``): a view's facts are used again only under the stamp
they were read at, as committed before the transaction that asks, and only when that
transaction's own records cannot have changed them; what a transaction read is kept
only once it committed. (R2.6/R2.7: the counters are never kept; the facts are those a
fresh read gives.)"""

from __future__ import annotations

import pytest

from domain.compaction.triggers import Counters
from schemas.contracts import RecordKind
from storage.compaction.view_cache import KEEPS_FACTS, Stamp, TxViews, ViewCache
from storage.compaction.view_state import ViewState, counted_after

SID, RUN = "s1", "r1"


def view(run_id: str = RUN, resumed: bool = False) -> ViewState:
    return ViewState(SID, run_id, "main", 7, Counters(1, 2), None, None, "0:0:0", resumed)


def committed(stamp: Stamp, v: ViewState | None = None) -> ViewCache:
    """A cache holding ``v`` read at ``stamp`` by a transaction that committed."""
    cache = ViewCache()
    tx = TxViews(cache)
    tx.read(SID, stamp, v or view())
    tx.commit()
    return cache


@pytest.mark.spec("R2.6", "R2.7")
def test_a_view_is_used_again_at_the_stamp_it_was_read_at() -> None:
    cache = committed(Stamp(10, "sum1"))
    assert TxViews(cache).lookup(SID, RUN, Stamp(10, "sum1")) == view()


@pytest.mark.spec("R2.6", "R2.7")
@pytest.mark.parametrize(
    "now",
    [
        Stamp(12, "sum1"),  # records another processor committed (a rebalance)
        Stamp(10, "sum2"),  # a summary committed (or one revoked)
    ],
)
def test_a_view_is_read_again_once_its_stamp_moved(now: Stamp) -> None:
    assert TxViews(committed(Stamp(10, "sum1"))).lookup(SID, RUN, now) is None


@pytest.mark.spec("R2.6")
def test_another_run_of_the_session_is_not_served_the_view() -> None:
    cache = committed(Stamp(10, None))
    assert TxViews(cache).lookup(SID, "r2", Stamp(10, None)) is None


@pytest.mark.spec("R2.6", "R2.7")
def test_its_own_records_that_keep_the_facts_keep_the_view_and_move_it_on_at_commit() -> None:
    cache = committed(Stamp(10, None))
    tx = TxViews(cache)
    tx.wrote(SID, 10, RecordKind.TOOL_OUTCOME)
    tx.wrote(SID, 11, RecordKind.ASSISTANT_MESSAGE)
    assert tx.lookup(SID, RUN, Stamp(12, None)) == view()
    tx.commit()
    assert TxViews(cache).lookup(SID, RUN, Stamp(12, None)) == view()


@pytest.mark.spec("R2.6", "R2.7")
def test_a_batch_that_only_appends_moves_the_view_on_without_reading_it() -> None:
    """A batch that writes a step to a session and reads no view (no observation in it)
    leaves the view kept at the stamp past its records: the next batch's is a hit."""
    cache = committed(Stamp(10, None))
    tx = TxViews(cache)
    tx.wrote(SID, 10, RecordKind.ASSISTANT_MESSAGE)
    tx.wrote(SID, 11, RecordKind.TOOL_OUTCOME)
    tx.commit()
    assert TxViews(cache).lookup(SID, RUN, Stamp(12, None)) == view()
    assert TxViews(cache).lookup(SID, RUN, Stamp(12, "sum1")) is None  # a summary since


@pytest.mark.spec("R2.6", "R2.7")
@pytest.mark.parametrize(
    "first, kind, spoiled",
    [
        (12, RecordKind.ASSISTANT_MESSAGE, False),  # records of another writer before these
        (10, RecordKind.RUN_STARTED, False),  # a record that may change a fact
        (10, RecordKind.ASSISTANT_MESSAGE, True),  # a savepoint rolled back: writes unknown
    ],
)
def test_a_view_is_not_moved_on_past_records_it_cannot_vouch_for(
    first: int, kind: RecordKind, spoiled: bool
) -> None:
    cache = committed(Stamp(10, None))
    tx = TxViews(cache)
    tx.wrote(SID, first, kind)
    if spoiled:
        tx.spoil()
    tx.commit()
    assert TxViews(cache).lookup(SID, RUN, Stamp(first + 1, None)) is None


@pytest.mark.spec("R2.6", "R2.7", "R11.8")
@pytest.mark.parametrize("kind", sorted(set(RecordKind) - KEEPS_FACTS))
def test_its_own_record_that_may_change_a_fact_makes_the_view_be_read_again(
    kind: RecordKind,
) -> None:
    tx = TxViews(committed(Stamp(10, None)))
    tx.wrote(SID, 10, kind)
    assert tx.lookup(SID, RUN, Stamp(11, None)) is None


@pytest.mark.spec("R2.6", "R2.7")
def test_a_view_read_in_a_transaction_that_did_not_commit_is_not_kept() -> None:
    cache = ViewCache()
    TxViews(cache).read(SID, Stamp(10, None), view())  # rolled back: no commit
    assert TxViews(cache).lookup(SID, RUN, Stamp(10, None)) is None
    spoiled = TxViews(cache)
    spoiled.read(SID, Stamp(10, None), view())
    spoiled.spoil()  # a savepoint of it rolled back
    spoiled.commit()
    assert TxViews(cache).lookup(SID, RUN, Stamp(10, None)) is None


@pytest.mark.spec("R2.6")
def test_a_resumed_runs_view_is_not_kept_its_counters_are_its_own() -> None:
    cache = committed(Stamp(10, None), view(resumed=True))
    assert TxViews(cache).lookup(SID, RUN, Stamp(10, None)) is None


@pytest.mark.spec("R2.6", "R2.7")
def test_a_view_read_in_the_transaction_serves_past_its_records_that_keep_the_facts() -> None:
    """Read after the run's start, the view serves the observations that follow the
    question and the step in the same batch; a record that may change a fact, or one
    written elsewhere than where its stamp stood, makes it be read again."""
    tx = TxViews(ViewCache())
    tx.wrote(SID, 10, RecordKind.RUN_STARTED)  # read again after this one...
    tx.read(SID, Stamp(11, None), view())
    assert tx.lookup(SID, RUN, Stamp(11, None)) == view()  # ... and then kept
    tx.wrote(SID, 11, RecordKind.USER_INPUT)
    tx.wrote(SID, 12, RecordKind.ASSISTANT_MESSAGE)
    assert tx.lookup(SID, RUN, Stamp(13, None)) == view()
    tx.wrote(SID, 14, RecordKind.TOOL_OUTCOME)  # 13 is not this transaction's
    assert tx.lookup(SID, RUN, Stamp(15, None)) is None
    tx.read(SID, Stamp(15, None), view())
    tx.wrote(SID, 15, RecordKind.RECORD_RETRACTED)
    assert tx.lookup(SID, RUN, Stamp(16, None)) is None


class _Tail:
    """A connection whose view tail holds one action step past any watermark."""

    def __init__(self) -> None:
        self.reads = 0

    async def fetchrow(self, sql: str, *args: object) -> dict[str, int]:
        self.reads += 1
        return {"turns": 0, "steps": 1}


@pytest.mark.spec("R7.2", "R7.3", "R8.4")
async def test_the_tail_past_a_watermark_is_read_only_when_a_record_is_past_it() -> None:
    conn = _Tail()
    # The session's next sequence is 10: its last record is 9.
    assert await counted_after(conn, view(), 9, next_sequence=10) == Counters()  # type: ignore[arg-type]
    assert conn.reads == 0
    assert await counted_after(conn, view(), 8, next_sequence=10) == Counters(0, 1)  # type: ignore[arg-type]
    assert await counted_after(conn, view(), 9) == Counters(0, 1)  # type: ignore[arg-type]
    assert conn.reads == 2
