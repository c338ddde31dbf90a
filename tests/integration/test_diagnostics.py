"""The diagnostics view of one model call, through the real stack (SPEC R18, issue 12):
``GET /v1/diagnostics/{call or prepared id}`` on Prepare names the summary in effect,
the externalized result with its read-back reference, the kept blocks and the budget
items — the view of ``domain.context.call_view`` — and refuses a key that may not read the
session."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

from domain.auth import KeyKind
from services.sdk.client import ContextClient, RunHandle
from storage import inspection
from storage.calls import views as call_views
from tests.support.flows import client
from tests.support.services import TEST_SPACE, Services
from tests.support.summarized import summarized_call

pytestmark = [pytest.mark.integration, pytest.mark.spec("R18")]
TAIL = "tail-of-the-large-result"


async def large_result(c: ContextClient, run: RunHandle) -> None:
    """A tool result over the release's inline limit (4000 tokens): shown as a view."""
    await c.append_model_result(
        run, "Reading the big log.", "big-m", [("big-c", "read_file", "{}")]
    )
    body = " ".join(f"entry{k}={k * 3}" for k in range(4000)) + " " + TAIL
    await c.append_tool_outcome(run, "big-c", "read_file", body)


def bearer(key: str, actor: str | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} | ({"X-AgentLoom-Actor": actor} if actor else {})


async def test_diagnostics_of_a_call_that_summarized_and_externalized(
    services: Services, db: Any
) -> None:
    async with client(services) as c:
        sid, call_id, covered = await summarized_call(c, db, before_call=large_result)
    prepared_id = await db.fetchval("SELECT prepared_id FROM model_calls WHERE call_id=$1", call_id)
    async with httpx.AsyncClient(base_url=services.prepare_url, timeout=60) as h:
        owner = (await h.get(f"/v1/sessions/{sid}", headers=bearer(services.api_key))).json()
        by_call = await h.get(f"/v1/diagnostics/{call_id}", headers=bearer(services.api_key))
        assert by_call.status_code == 200, by_call.text
        got = by_call.json()
        by_prepared = await h.get(
            f"/v1/diagnostics/{prepared_id}", headers=bearer(services.api_key, owner["actor_id"])
        )
        assert by_prepared.status_code == 200 and by_prepared.json() == got

        # The view stored with the call (storage.calls.views: the console's, the CLI's).
        facts = await inspection.call_facts(db, sid, call_id)
        stored = await call_views.view_of(db, sid, call_id)
        assert facts is not None and stored is not None and not stored.rebuilt
        view = json.loads(json.dumps(stored.to_dict()))
        assert {k: got[k] for k in view} | {"blocks": [_plain(b) for b in got["blocks"]]} == view

        summary_id = got["chain"][0]["summary_id"]
        assert got["summary_id"] == summary_id
        blocks = {b["block_id"]: b for b in got["blocks"]}
        assert blocks[f"summary:{summary_id}"]["decision"] == "kept"
        assert (blocks[f"rec:{covered}"]["decision"], blocks[f"rec:{covered}"]["reason"]) == (
            "summarized",
            "covered_by_summary",
        )
        outside = [b for b in got["blocks"] if b["decision"] == "externalized"]
        assert len(outside) == 1 and outside[0]["reason"] == "large_result_view"
        ext = outside[0]
        assert ext["read_back"]["ref"] == f"rec:{ext['record_id']}"
        page = await h.get(
            ext["read_back"]["path"], params={"offset": 0, "limit": 1_000_000},
            headers=bearer(services.api_key),
        )  # fmt: skip
        assert page.status_code == 200 and page.json()["content"].endswith(TAIL)
        kept = [b for b in got["blocks"] if b["decision"] == "kept"]
        assert any(b["kind"] == "user_input" for b in kept)  # the open question is kept
        assert got["decisions"] == {d: len(ids) for d, ids in got["by_decision"].items()} and set(
            got["decisions"]
        ) == {"kept", "summarized", "externalized"}
        items = {s["item"]: s["tokens"] for s in got["bar"]["segments"]}
        assert items and got["bar"]["input_budget"] > 0
        assert items == {k: v for k, v in facts.budget["items"].items() if int(v) > 0}

        # A key of another actor of the space may not read the session: refused, like
        # the session's other reads; an unknown id is not found.
        other = (await services.new_key(TEST_SPACE, KeyKind.USER, f"o-{uuid.uuid4().hex[:6]}")).key
        refused = await h.get(f"/v1/diagnostics/{call_id}", headers=bearer(other))
        assert (refused.status_code, refused.json()["error"]["code"]) == (403, "not_granted")
        assert "blocks" not in refused.json()
        unknown = await h.get("/v1/diagnostics/call-none", headers=bearer(services.api_key))
        assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "not_found")


def _plain(b: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in b.items() if k != "read_back"}
