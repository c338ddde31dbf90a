"""Two Prepare instances behind one address serve one session interchangeably (issue 13):
a context prepared on A is checked and reported on B, the usage B was told calibrates
A's estimates; both check release hooks against what the deployment loads (R17).
Real Kafka, PostgreSQL and two Prepare processes over the same database and topics."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest

from devstack.launcher import Proc
from services.sdk.client import ApiError, ContextClient, RunHandle
from storage.calls.prepared_contexts import PgPreparedContexts
from storage.pool import create_pool
from tests.support.flows import client, new_session
from tests.support.harness import second_prepare
from tests.support.services import Services, start_services
from tests.support.stack import Stack

# Four processes start in the fixture: on a shared 2-core machine that alone can take
# minutes, beyond the default per-test timeout (which covers the setup).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

PROFILE = {"context_capacity": 4000, "output_reserve": 500, "safety_margin": 100}


@dataclass
class Pair:
    a: Services  # the whole stack, with Prepare instance A
    b: Proc  # Prepare instance B: same settings, its own port
    b_url: str


@pytest.fixture(scope="module")
def pair(stack: Stack, pg_dsn: str) -> Iterator[Pair]:
    # Calibration read fresh on every prepare (a TTL of 0), so the test need not wait for
    # the cache; compaction hooks named so that publishing can check bindings against them.
    settings = {"ALC_CALIBRATION_TTL_S": "0", "ALC_COMPACTION_HOOKS": "tests.support.hooks:make"}
    a = start_services(stack, pg_dsn, **settings)
    try:
        with second_prepare(a) as (b, url):
            yield Pair(a, b, url)
    finally:
        a.stop()


@asynccontextmanager
async def clients(pair: Pair) -> AsyncIterator[tuple[ContextClient, ContextClient]]:
    async with (
        client(pair.a) as on_a,
        ContextClient(
            pair.a.stack.kafka_bootstrap,
            pair.b_url,
            topic=pair.a.env("ALC_TOPIC_RECORDS"),
            api_key=pair.a.api_key,
        ) as on_b,
    ):
        yield on_a, on_b


async def _asked(c: ContextClient, model: str) -> RunHandle:
    session = await new_session(c, model_profile=PROFILE | {"name": model})
    run = await c.start_run(session)
    await c.append_user(run, "What changed in the release?", f"q-{uuid.uuid4().hex[:6]}")
    return run


@pytest.mark.spec("R10.5", "R15.1")
async def test_a_context_prepared_on_a_is_checked_and_reported_on_b(pair: Pair) -> None:
    async with clients(pair) as (on_a, on_b):
        run = await _asked(on_a, f"scale-{uuid.uuid4().hex[:6]}")
        prepared = await on_a.prepare(run, purpose="completion")
        call = await on_b.check_model_call(run, prepared)
        assert call["status"] == "ready" and not call["idempotent_replay"]
        sent = [m["content"] for m in call["request"]["messages"]]
        assert sent == [m["content"] for m in prepared["messages"]]
        # A retry that reaches A gets the call B recorded (one record per context).
        again = await on_a.check_model_call(run, prepared)
        assert again["idempotent_replay"] and again["call_id"] == call["call_id"]
        done = await on_b.report_model_result(run, call["call_id"], {"content": "ok"}, {})
        assert done["status"] == "completed"
        with pytest.raises(ApiError) as gone:
            await on_b.check_model_call(run, {"prepared_id": "prep_never"})
        assert gone.value.details["reason"] == "prepared_not_found"


@pytest.mark.spec("R6.4")
async def test_usage_reported_on_b_calibrates_the_estimates_of_a(pair: Pair) -> None:
    model = f"calib-{uuid.uuid4().hex[:6]}"  # calibration is per model: this test's own
    async with clients(pair) as (on_a, on_b):
        run = await _asked(on_a, model)
        first = await on_a.prepare(run, purpose="completion")
        assert "calibration" not in first["budget"]
        call = await on_b.check_model_call(run, first)
        estimated = call["budget"]["final_estimated_input_raw"]
        usage = {"input_tokens": estimated * 3 // 2}
        done = await on_b.report_model_result(run, call["call_id"], {"content": "ok"}, usage)
        assert done["drift"]["calibration"]["samples"] == 1
        nxt = await on_a.prepare(run, purpose="completion")
        assert nxt["budget"]["calibration"] == done["drift"]["calibration"]
        assert nxt["budget"]["calibrated_input"] > nxt["budget"]["estimated_input"]
        # A second report, on A, folds into the same stored calibration (two samples).
        call2 = await on_a.check_model_call(run, nxt)
        usage2 = {"input_tokens": call2["budget"]["final_estimated_input_raw"]}
        done2 = await on_a.report_model_result(run, call2["call_id"], {"content": "ok"}, usage2)
        assert done2["drift"]["calibration"]["samples"] == 2


@pytest.mark.spec("R10.5")
async def test_prepared_contexts_are_kept_for_the_retention_then_pruned(
    pair: Pair, pg_dsn: str
) -> None:
    async with clients(pair) as (on_a, on_b):
        run = await _asked(on_a, f"keep-{uuid.uuid4().hex[:6]}")
        old = await on_a.prepare(run, purpose="completion")
        fresh = await on_a.prepare(run, purpose="completion")
        pool = await create_pool(pg_dsn, 1, 2)
        try:
            await _age(pool, old["prepared_id"], hours=25)
            await _age(pool, fresh["prepared_id"], hours=0)  # landed too (written behind)
            assert await PgPreparedContexts(pool).prune(24 * 3600.0) >= 1
            left = {
                r["prepared_id"]
                for r in await pool.fetch("SELECT prepared_id FROM prepared_contexts")
            }
        finally:
            await pool.close()
        assert old["prepared_id"] not in left and fresh["prepared_id"] in left
        await on_b.check_model_call(run, fresh)
        with pytest.raises(ApiError) as pruned:
            await on_b.check_model_call(run, old)
        assert pruned.value.details["reason"] == "prepared_not_found"


async def _age(pool: asyncpg.Pool, prepared_id: str, hours: int) -> None:
    # The context is written behind the prepare's answer: wait (bounded) until it landed.
    for _ in range(200):
        aged = await pool.execute(
            "UPDATE prepared_contexts SET created_at = now() - make_interval(hours => $2)"
            " WHERE prepared_id=$1",
            prepared_id,
            hours,
        )
        if aged == "UPDATE 1":
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"prepared context {prepared_id} was never stored")


@pytest.mark.spec("R17", "R14")
async def test_publishing_checks_hook_ids_and_keeps_the_overrides(pair: Pair) -> None:
    overrides: dict[str, Any] = {
        "compaction": {"user_turns": 4},
        "hook_bindings": [
            {"point": "context.compact.after", "hook": "tag-and-keep", "version": "7"}
        ],
    }
    body = {
        "agent_id": "agent",
        "instructions": "Be brief.",
        "model_profile": PROFILE | {"name": "m"},
    }
    async with clients(pair) as (on_a, on_b):
        rel = await on_b.register_release(**body, context_policy=overrides)
        shown = await on_a._call("GET", f"/v1/releases/{rel['release_id']}")
        assert shown["policy_overrides"] == overrides
        assert shown["context_policy"]["compaction"]["user_turns"] == 4
        assert shown["context_policy"]["hook_bindings"][0]["hook"] == "tag-and-keep"
        unknown = {
            "hook_bindings": [{"point": "model.chat.before", "hook": "nobody", "version": "1"}]
        }
        with pytest.raises(ApiError) as refused:
            await on_a.register_release(**body, context_policy=unknown)
        assert refused.value.code == "invalid_policy"
        assert refused.value.details["path"] == "hook_bindings[0].hook"
