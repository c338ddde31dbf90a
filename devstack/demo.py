"""``make demo``: a real multi-question agent session through the whole pipeline.

Starts the session processor and the Prepare service as separate processes against the
running Kafka + PostgreSQL (``deploy/stack.sh up``), drives a scripted 3-question agent
session through the runtime SDK — model messages with tool calls, tool results including
one failure and one MCP-style tool, one skill load — and prints, for every model call,
what the model saw.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg

from devstack.demo_analytics import print_summary
from devstack.launcher import service_set
from domain.auth import KeyKind
from schemas.contracts import ChildResultPayload, SkillRef, ToolStatus
from schemas.settings import Settings
from services.sdk.client import ApiError, ContextClient, RunHandle
from storage.api_keys import issue, revoke_key
from storage.tokenizers import make_counter
from streams.kafka.bus_secrets import issuer_secret

SKILL_BODY = (
    "# release-notes skill v3\nWrite release notes as: Summary, Breaking changes, "
    "Fixes. Cite the issue id for each fix."
)
RELEASE = {
    "agent_id": "demo-release-assistant",
    "instructions": "You are a release assistant for the agentloom repository. Use tools to "
    "read files and run tests; never invent results.",
    "tool_catalog": [
        {
            "name": "read_file",
            "description": "Read a file of the repository",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
        {
            "name": "run_tests",
            "description": "Run the test suite for a package",
            "parameters": {"type": "object", "properties": {"package": {"type": "string"}}},
        },
        {
            "name": "docs_search",
            "description": "Search the docs (MCP server docs-mcp)",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
        {
            "name": "load_skill",
            "description": "Load a bound skill by name",
            "parameters": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
    ],
    "skill_bindings": [
        {
            "name": "release-notes",
            "version": "3",
            "description": "Write release notes in the house format",
            "load_entry": "load_skill",
        }
    ],
    "model_profile": {
        "name": "demo-model-32k",
        "context_capacity": 32768,
        "output_reserve": 4096,
        "safety_margin": 1024,
    },
}


class Printer:
    def __init__(self) -> None:
        self.calls = 0

    def model_call(self, title: str, run: RunHandle, prepared: dict[str, Any]) -> None:
        self.calls += 1
        b = prepared["budget"]
        msgs = prepared["messages"]
        inherited = [m for m in msgs if m.get("category") == "history"]
        print(f"\n── model call #{self.calls}: {title}")
        print(f"   run {run.run_id} thread {run.instance_id} purpose={prepared['purpose']}")
        print(
            f"   {len(msgs)} messages | estimated {b['estimated_input']} of InputBudget "
            f"{b['input_budget']} tokens ({b['ratio']:.1%}) | counted with "
            f"{b['counting_method']}"
        )
        print("   itemized: " + ", ".join(f"{k}={v}" for k, v in b["items"].items() if v))
        print(
            f"   inherited: {len(inherited)} messages from records through session "
            f"sequence {prepared['inherited']['through_session_sequence']}"
        )
        for m in msgs:
            text = " ".join(str(m.get("content", "")).split())[:70]
            extra = ""
            if m.get("tool_calls"):
                extra = " calls " + ", ".join(
                    f"{c['name']}{c['arguments']}" for c in m["tool_calls"]
                )
            if m["role"] == "tool":
                extra = f" [{m['name']} {m['tool_call_id']} status={m['status']}]"
            if m.get("block") == "skill_instruction":
                extra += f" [skill instruction {m.get('skill')}, {m.get('reason')}]"
            if m.get("decision") == "externalized":
                extra += f" [externalized view of {m.get('content_ref')}]"
            print(f"     {m['role']:<9} {m.get('category', ''):<12} {text!r}{extra}")
            if m.get("block") in ("plan", "constraints"):  # the frontier, whole
                for line in str(m["content"]).splitlines():
                    print(f"       | {line}")

    def gateway(self, record: dict[str, Any]) -> None:
        p = record["prepared"]
        drift = record.get("drift") or {}
        print(
            f"   gateway: call {record['call_id']} sent; protected blocks "
            f"{len(p['protected_block_manifest'])}; provider reported "
            f"{drift.get('reported_input')} input tokens vs our {drift.get('estimated_input')}"
            f" (drift {drift.get('drift_ratio', 0):+.1%}; calibration factor "
            f"{(drift.get('calibration') or {}).get('factor')})"
        )


async def run_session(settings: Settings, prepare_url: str, api_key: str) -> None:
    out = Printer()
    tokenizer = make_counter("cl100k_base", settings.tiktoken_file)
    async with ContextClient(
        settings.kafka_bootstrap,
        prepare_url,
        topic=settings.topic_records,
        producer_name="demo-runtime",
        api_key=api_key,
    ) as c:
        rel = await c.register_release(**RELEASE)
        session = await c.open_session("demo-space", "demo-user", rel["release_id"])
        print(
            f"release {rel['release_id']} (policy {rel['policy_revision']}, InputBudget "
            f"{rel['input_budget']}); session {session['session_id']}"
        )

        # ── Run A: question 1 ──────────────────────────────────────────────────────────
        a = await c.start_run(session)
        await c.append_user(a, "Why is CI red on main? Summarize the failing tests.", "a-q")
        out.model_call("Run A, first call of question 1", a, await c.prepare(a))
        await c.append_model_result(
            a,
            "I will read the CI log and run the failing package.",
            "a-m1",
            [
                ("a-c1", "read_file", '{"path": "ci/last.log"}'),
                ("a-c2", "run_tests", '{"package": "storage"}'),
            ],
        )
        await c.append_tool_outcome(
            a, "a-c1", "read_file", "FAILED tests/test_ingest.py::test_copy - jsonb encoder"
        )
        await c.append_tool_outcome(
            a,
            "a-c2",
            "run_tests",
            "error: database not reachable",
            status=ToolStatus.ERROR,
            error_code="ECONNREFUSED",
        )
        out.model_call("Run A, after the tool results (one failed)", a, await c.prepare(a))
        await c.append_model_result(
            a,
            "Loading the release-notes skill to write it up.",
            "a-m2",
            [("a-c3", "load_skill", '{"name": "release-notes"}')],
        )
        await c.append_tool_outcome(
            a,
            "a-c3",
            "load_skill",
            SKILL_BODY,
            tool_kind="skill_load",
            skill=SkillRef("release-notes", "3", _sha(SKILL_BODY)),
        )
        await c.activate_resource(a, "skill", "release-notes", "3", SKILL_BODY)
        answer = "test_copy fails on the jsonb encoder; run_tests could not reach the database."

        async def send(request: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
            # the runtime's own provider client goes here; the demo answers from a script
            # and reports a usage figure: the gateway records it and reports the drift.
            # Its "provider" counts like OpenAI's cookbook: content + 4 per message, the tool
            # definitions, and 3 tokens priming the reply.
            usage = 3 + tokenizer.count(json.dumps(request.get("tools", [])))
            usage += sum(
                tokenizer.count(str(m.get("content") or "")) + 4 for m in request["messages"]
            )
            return {"content": answer}, {"input_tokens": usage, "output_tokens": 20}

        # Through the gateway: final check (hooks, protected blocks, budget), the provider
        # request, and the model call record with usage (R9.8, R10.5, R15.1).
        _, record = await c.call_model(a, send, {"temperature": 0})
        out.model_call("Run A, after the skill load (through the gateway)", a, record["prepared"])
        out.gateway(record)
        await c.append_model_result(a, answer, "a-m3")
        await c.finish_run(a)

        # ── Run B: question 2 sees all of Run A ────────────────────────────────────────
        b = await c.start_run(session)
        await c.append_user(
            b, "Which call failed earlier, and what do the docs say about it?", "b-q"
        )
        seen_b = await c.prepare(b)
        out.model_call("Run B, question 2 (inherits Run A)", b, seen_b)
        _check_run_b(seen_b)
        try:
            await c.start_run(session)
        except ApiError as exc:
            print(f"\n   a second question while Run B is active → {exc.code}: {exc.message}")
        await c.append_model_result(
            b, "Searching the docs.", "b-m1", [("b-c1", "docs_search", '{"query": "ECONNREFUSED"}')]
        )
        await c.append_tool_outcome(
            b,
            "b-c1",
            "docs_search",
            "docs/ops.md: start PostgreSQL with deploy/stack.sh up",
            tool_kind="mcp",
            server="docs-mcp",
        )
        out.model_call("Run B, after the MCP tool result", b, await c.prepare(b))
        await c.append_model_result(
            b, "run_tests failed: PostgreSQL was down (docs/ops.md).", "b-m2"
        )
        await c.finish_run(b)

        # ── Run C: question 3 sees Run A exactly once ──────────────────────────────────
        cr = await c.start_run(session)
        await c.append_user(cr, "Write the release notes for this fix.", "c-q")
        seen_c = await c.prepare(cr)
        out.model_call("Run C, question 3 (inherits Runs A and B)", cr, seen_c)
        ids = [i for m in seen_c["messages"] for i in m["record_ids"]]
        dupes = len(ids) - len(set(ids))
        print(f"\n   Run C sees {len(set(ids))} source records; duplicates: {dupes}")
        if dupes:
            raise SystemExit("demo failed: a record appeared twice in Run C")
        await c.finish_run(cr)
        await resume_and_child(c, session, a, out)
        await compaction_session(c, settings, out)
    print(f"\ndemo finished: {out.calls} model calls prepared through Kafka + PostgreSQL")


async def resume_and_child(
    c: ContextClient, session: dict[str, Any], a: RunHandle, out: Printer
) -> None:
    """Part 2: resume Run A in its own thread (later questions stay out, R2.5) and give a
    child task only the background it needs (R13)."""
    print("\n══ part 2: resume an old run, and a child task with an explicit transfer")
    await c.resume_run(a, reason="user asked a follow-up on question 1")
    await c.append_user(a, "Also, which test file failed?", "a-supplement", supplement=True)
    resumed = await c.prepare(a)
    out.model_call("Run A resumed (its own snapshot: no later questions)", a, resumed)
    texts = [m["content"] for m in resumed["messages"]]
    leaked = any("Which call failed" in t for t in texts)
    print(f"   later questions mixed in: {'yes' if leaked else 'no'}")
    if leaked:
        raise SystemExit("demo failed: a later question leaked into the resumed run")
    await c.append_model_result(a, "tests/test_ingest.py failed.", "a-m4")
    await c.finish_run(a)
    d = await c.start_run(session)
    await c.append_user(d, "Ask a helper to double-check the CI log only.", "d-q")
    first = await c.prepare(d)
    log_result = next(
        i for m in first["messages"] if m.get("name") == "read_file" for i in m["record_ids"]
    )
    child = await c.export_for_child(d, f"{d.run_id}.helper", [log_result])
    await c.append_user(child, "Check the CI log for the failing test name.", "child-q")
    seen = await c.prepare(child)
    out.model_call("child task of Run D (sees only the transferred CI log)", child, seen)
    await c.append_model_result(child, "The failing test is test_copy.", "child-m")
    await c.accept_child_result(
        d,
        ChildResultPayload(
            child.instance_id,
            "child-op-1",
            "ok",
            "The failing test is test_copy.",
            source_revision=1,
        ),
        "The failing test is test_copy.",
    )
    out.model_call("Run D after accepting the child result (as material)", d, await c.prepare(d))
    await c.finish_run(d)


async def compaction_session(c: ContextClient, settings: Settings, out: Printer) -> None:
    """Part 3: proactive compaction. A release whose policy compacts every 2 questions;
    the compaction service summarizes the old prefix and the processor commits it."""
    print("\n══ part 3: proactive compaction (policy: every 2 questions, keep 1 recent group)")
    rel = await c.register_release(
        **{
            **RELEASE,
            "agent_id": "demo-compacting-assistant",
            "context_policy": {"recent_complete_groups": 1, "compaction": {"user_turns": 2}},
        }
    )
    session = await c.open_session("demo-space", "demo-user", rel["release_id"])
    run = None
    paths = ("storage/records/ingest.py", "domain/planning.py", "services/bus.py")
    for q, path in enumerate(paths):
        run = await c.start_run(session)
        await c.append_user(run, f"Review {path} for error handling.", f"k{q}-q")
        if q == 0:  # a user constraint, pinned until retired
            await c.set_constraint(run, "Never change a public function's signature.")
        # the model keeps its plan through the plan tool: one step per file (R4.4).
        steps = [
            {"id": f"s{i}", "step": f"review {p}", "status": _step_status(i, q)}
            for i, p in enumerate(paths)
        ]
        await c.update_plan(run, steps, event_key=f"plan:k{q}")
        await c.append_model_result(
            run,
            f"Reading {path}.",
            f"k{q}-m1",
            [(f"k{q}-c", "read_file", json.dumps({"path": path}))],
        )
        body = "\n".join(f"{path}:{i}: def step_{i}(): ...  # handles case {i}" for i in range(40))
        await c.append_tool_outcome(run, f"k{q}-c", "read_file", body)
        await c.append_model_result(run, f"{path} handles its errors.", f"k{q}-m2")
        await c.prepare(run)  # each action prepare is a trigger check
        if q < 2:
            await c.finish_run(run)
    assert run is not None
    conn = await asyncpg.connect(settings.pg_dsn)
    try:
        for _ in range(300):  # jobs run in the compaction service; wait for them
            checked = await conn.fetchval(
                "SELECT count(*) FROM trigger_reports WHERE session_id=$1"
                " AND event_key LIKE 'obs:%'",
                session["session_id"],
            )
            running = await conn.fetchval(
                "SELECT count(*) FROM compaction_jobs WHERE session_id=$1 AND status = 'requested'",
                session["session_id"],
            )
            if checked >= 3 and running == 0:  # all three checks seen, no job running
                break
            await asyncio.sleep(0.1)
        jobs = await conn.fetch(
            "SELECT status, reason FROM compaction_jobs WHERE session_id=$1 ORDER BY created_at",
            session["session_id"],
        )
        rev = await conn.fetchrow(
            "SELECT summary_id, covered_tokens, summary_tokens, budget_before, budget_after,"
            " target_reached, trigger_reasons, counter_baseline FROM summary_revisions"
            " WHERE session_id=$1 ORDER BY created_at DESC LIMIT 1",
            session["session_id"],
        )
        reports = await conn.fetch(
            "SELECT decision, reason, fired FROM trigger_reports"
            " WHERE session_id=$1 ORDER BY report_id",
            session["session_id"],
        )
    finally:
        await conn.close()
    print(
        "   jobs: "
        + ", ".join(j["status"] + (f" ({j['reason']})" if j["reason"] else "") for j in jobs)
    )
    print(
        "   trigger checks: "
        + ", ".join(
            f"{r['decision']}{'(' + ','.join(r['fired']) + ')' if r['fired'] else ''}"
            for r in reports
        )
    )
    if rev is None:
        raise SystemExit("demo failed: no summary was committed")
    print(
        f"   committed {rev['summary_id']} ({', '.join(rev['trigger_reasons'])}):"
        f" {rev['covered_tokens']} tokens of history -> {rev['summary_tokens']} tokens;"
        f" budget {rev['budget_before']} -> {rev['budget_after']};"
        f" baseline now {rev['counter_baseline']}"
    )
    seen = await c.prepare(run)
    out.model_call("question 3 after compaction (summary + recent records)", run, seen)
    blocks = {m.get("block") for m in seen["messages"]}
    if not {"summary", "plan", "constraints"} <= blocks:
        raise SystemExit(f"demo failed: the call after compaction lacks a frontier block: {blocks}")
    versions = seen["dependency_versions"]
    print(
        f"   frontier: plan v{versions['plan_version']},"
        f" constraints v{versions['constraints_version']} (required blocks after the thread)"
    )
    await c.finish_run(run)


def _step_status(step: int, question: int) -> str:
    return "done" if step < question else "in_progress" if step == question else "pending"


def _check_run_b(prepared: dict[str, Any]) -> None:
    tools = [m for m in prepared["messages"] if m["role"] == "tool"]
    statuses = {m["tool_call_id"]: m["status"] for m in tools}
    calls = [c for m in prepared["messages"] for c in m.get("tool_calls", [])]
    ok = (
        statuses.get("a-c2") == "error"
        and "a-c3" in statuses
        and any(c["id"] == "a-c1" and "ci/last.log" in c["arguments"] for c in calls)
    )
    print(
        f"   Run B sees Run A's tool arguments and results, the failed call and the skill "
        f"load: {'yes' if ok else 'NO'}"
    )
    if not ok:
        raise SystemExit("demo failed: Run B does not see Run A's interactions")


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


async def demo_with_key(settings: Settings) -> None:
    """The demo runtime authenticates like any other (R15.4): a host key of demo-space,
    created here (as ``agentloom-keys create`` does) and revoked when the demo ends."""
    issuer = issuer_secret(settings)
    key = await issue(settings.pg_dsn, "demo-space", KeyKind.HOST, label="make demo", issuer=issuer)
    print(f"[demo] dev key {key.key_id}: host key of demo-space (agentloom-keys create)")
    base = f"http://{settings.prepare_host}:{settings.prepare_port}"
    since = int(time.time()) // 60 * 60
    try:
        await run_session(settings, base, key.key)
        await print_summary(base, key.key, since)
    finally:
        conn = await asyncpg.connect(settings.pg_dsn)
        try:
            await revoke_key(conn, key.key_id)
        finally:
            await conn.close()


def main() -> None:
    settings = Settings()
    repo = Path(__file__).resolve().parents[1]
    logs = repo / ".state" / "logs" / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = service_set(
        env, logs, repo, settings.prepare_host, settings.prepare_port, sys.executable
    )
    print(
        f"[demo] starting Prepare, the session processor, the compaction and analytics services"
        f" (logs in {logs})"
    )
    try:
        procs.start(with_analytics=True)
        print("[demo] services ready")
        asyncio.run(demo_with_key(settings))
    finally:
        print("[demo] stopping services")
        procs.stop()


if __name__ == "__main__":
    main()
