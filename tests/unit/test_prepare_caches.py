"""Prepare's caches of immutable compaction facts stay bounded in a long-running process
(issue 13: an instance sees every session's summaries, each with its covered ids)."""

from __future__ import annotations

from typing import Any

from storage.compaction import view as compaction_view
from storage.compaction.view import PgCompactionReads
from storage.compaction.view_state import ViewStateCache


class _Pool:
    def __init__(self) -> None:
        self.reads: list[str] = []

    async def fetchrow(self, _sql: str, summary_id: str) -> dict[str, Any]:
        self.reads.append(summary_id)
        return {"summary_text": f"t{summary_id}", "summary_tokens": 3, "covered_record_ids": ["r"]}


async def test_summaries_are_an_lru_of_bounded_size(monkeypatch: Any) -> None:
    monkeypatch.setattr(compaction_view, "SUMMARY_CACHE", 3)
    pool = _Pool()
    reads = PgCompactionReads(pool)  # type: ignore[arg-type]
    for sid in ("a", "b", "c", "a", "d"):  # "a" used again: "b" is the oldest when d comes
        view = await reads.summary(sid)
        assert view is not None and view.text == f"t{sid}"
    assert pool.reads == ["a", "b", "c", "d"]
    await reads.summary("a")
    await reads.summary("b")  # evicted: read again
    assert pool.reads == ["a", "b", "c", "d", "b"]
    assert len(reads._summaries) == 3


def test_view_state_facts_are_forgotten_past_the_limit() -> None:
    cache = ViewStateCache(limit=2)
    cache.reusable.update({("s1", "r1"): True, ("s1", "r2"): False})
    cache.bound()
    assert len(cache.reusable) == 2  # at the limit: kept
    cache.reusable[("s1", "r3")] = True
    cache.bound()
    assert cache.reusable == {}
