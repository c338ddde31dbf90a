"""The summary a view reuses is looked up along its chain (R2.7): the newest few are read
with the view's row, the rest of a long chain only when none of those may serve
(issue 13: a 1,000-question session's chain holds hundreds of roll-ups)."""

from __future__ import annotations

from typing import Any

import pytest

from storage.compaction.view_state import CHAIN_DEPTH, load_view_state

RUN = "run_now"


class _Conn:
    """Answers ``load_view_state``'s queries for one session whose summary chain is
    ``chain`` (newest first); a summary serves this run only if it was made in it."""

    def __init__(self, chain: list[str], own: set[str]) -> None:
        self.chain, self.own = chain, own
        self.depths: list[int | None] = []
        self.reuse_reads = 0  # reuse checks read on their own, not with the view's row

    async def fetchrow(self, sql: str, *args: Any) -> dict[str, Any] | None:
        if "AS missing" in sql:  # a summary of another run's view never serves here
            self.reuse_reads += 1
            return {"missing": True, "later": []}
        if "AS more" in sql:  # the view's row
            depth = args[3]
            self.depths.append(depth)
            walked = self.chain if depth is None else self.chain[:depth]
            more = depth is not None and len(self.chain) > depth
            newest = walked[0] if walked else None
            return {"through": args[1], "user_turns": 1, "model_steps": 2,
                    "active_job_id": None, "later": False, "revocations": "0:0:0",
                    "chain": walked, "more": more, "reuse_of": newest,
                    "reuse_missing": newest not in self.own, "reuse_later": []}  # fmt: skip
        summary_id = args[0]
        return {"summary_id": summary_id, "parent_summary_id": None, "source_watermark": 5,
                "view_run_id": RUN if summary_id in self.own else "run_other",
                "view_through": 3, "covered_record_ids": [], "counter_baseline": {}}  # fmt: skip


@pytest.mark.spec("R2.7")
async def test_the_newest_reusable_summary_is_found_past_the_first_few() -> None:
    chain = [f"s{i}" for i in range(CHAIN_DEPTH + 5)]
    conn = _Conn(chain, own={f"s{CHAIN_DEPTH + 2}", f"s{CHAIN_DEPTH + 4}"})
    view = await load_view_state(conn, "sess", RUN, through=3)  # type: ignore[arg-type]
    assert view is not None and view.summary is not None
    assert view.summary.summary_id == f"s{CHAIN_DEPTH + 2}"  # the newest that serves
    assert conn.depths == [CHAIN_DEPTH, None]


@pytest.mark.spec("R2.7")
async def test_a_serving_summary_among_the_newest_reads_no_further() -> None:
    chain = [f"s{i}" for i in range(CHAIN_DEPTH + 5)]
    conn = _Conn(chain, own={"s1", "s3"})
    view = await load_view_state(conn, "sess", RUN, through=3)  # type: ignore[arg-type]
    assert view is not None and view.summary is not None and view.summary.summary_id == "s1"
    assert conn.depths == [CHAIN_DEPTH]
    assert conn.reuse_reads == 0  # the newest summary's reuse came with the row
    none = _Conn(chain, own=set())
    view = await load_view_state(none, "sess", RUN, through=3)  # type: ignore[arg-type]
    assert view is not None and view.summary is None and none.depths == [CHAIN_DEPTH, None]
