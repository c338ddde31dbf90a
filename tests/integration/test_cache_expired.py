"""Compaction when the cache is cold anyway, on the real stack (issue 39 item 6, R7, R9):
a session idle past its model's cache lifetime, its view over ``target_context_ratio``
but under the ratio trigger, is compacted at its next prepare — trigger reason
``cache_expired`` — and that prepare is answered on the new summary.

The idle gap is made without waiting five minutes: the session's last model call is
dated back in the database, where Prepare measures the gap (``model_calls.created_at``
against the database's clock)."""

from __future__ import annotations

import asyncpg
import pytest

from tests.integration.test_compaction import round_
from tests.support.flows import PROFILE, client, new_session
from tests.support.services import Services

pytestmark = [pytest.mark.integration, pytest.mark.spec("R7", "R9.1")]

BUDGET = PROFILE["context_capacity"] - PROFILE["output_reserve"] - PROFILE["safety_margin"]
TARGET, TRIGGER = BUDGET * 6 // 10, BUDGET * 8 // 10  # 8,700 and 11,600 of 14,500


async def jobs(db: asyncpg.Pool, sid: str) -> list[asyncpg.Record]:
    return await db.fetch(
        "SELECT job_id, status, request->'trigger_reasons' AS reasons FROM compaction_jobs"
        " WHERE session_id=$1",
        sid,
    )


async def test_a_session_back_after_the_cache_ttl_compacts_at_its_next_prepare(
    services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        # a model of its own: no other test's reported usage calibrates its estimates
        session = await new_session(
            c,
            model_profile={**PROFILE, "name": "cache-expiry-model"},
            context_policy={"recent_complete_groups": 1},
        )
        sid = session["session_id"]
        run = await c.start_run(session)
        await c.append_user(run, "What do the three data files hold?", "a-q")
        for i in range(3):
            await round_(c, run, f"a{i}", result_tokens=2_000)
        prepared = await c.prepare(run)
        assert TARGET <= prepared["budget"]["estimated_input"] < TRIGGER
        call = await c.check_model_call(run, prepared)
        await c.report_model_result(run, call["call_id"], {"content": "They hold rows."})
        await c.append_model_result(run, "They hold rows.", "a-final")
        await c.finish_run(run)

        # Back within the cache's lifetime: a new question, nothing is due yet.
        run = await c.start_run(session)
        await c.append_user(run, "And the fifth one?", "b-q")
        warm = await c.prepare(run)
        assert warm["dependency_versions"]["summary_id"] is None
        assert await jobs(db, sid) == []

        # The same question after the session sat idle past the 5-minute lifetime.
        await db.execute(
            "UPDATE model_calls SET created_at = created_at - interval '6 minutes'"
            " WHERE session_id=$1",
            sid,
        )
        cold = await c.prepare(run)

    (job,) = await jobs(db, sid)
    assert job["status"] == "committed"
    assert job["reasons"] == ["cache_expired"]
    # The decision record: what fired, the idle time against the cache's lifetime.
    (report,) = await db.fetch(
        "SELECT fired, values, thresholds, decision FROM trigger_reports"
        " WHERE session_id=$1 AND job_id=$2",
        sid,
        job["job_id"],
    )
    assert (list(report["fired"]), report["decision"]) == (["cache_expired"], "job_started")
    assert report["values"]["idle_ms"] >= 360_000 > report["thresholds"]["idle_ms"] == 300_000
    # The prepare waited for the job: its answer reads the summary, well under the target.
    assert cold["dependency_versions"]["summary_id"] is not None
    assert cold["budget"]["estimated_input"] < TARGET
    (revision,) = await db.fetch(
        "SELECT trigger_reasons FROM summary_revisions WHERE session_id=$1", sid
    )
    assert list(revision["trigger_reasons"]) == ["cache_expired"]
