"""The installed ``agentloom`` command, run as a subprocess against the real stack (R17, R18
and the operator commands of issue 14): exit codes, ``--json`` and what each command does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from schemas.contracts import RecordKind
from schemas.settings import Settings
from schemas.wire import DeadLetter, encode_dead_letter, encode_event
from storage.calls import views as call_views
from storage.migrate import apply_dsn
from streams.kafka.provision import provision
from tests.support.flows import client
from tests.support.kafka import auth
from tests.support.services import Services, made
from tests.support.stack import Stack
from tests.support.summarized import summarized_call
from tests.unit.factories import make_event

pytestmark = pytest.mark.integration
AGENTLOOM = str(Path(sys.executable).with_name("agentloom"))
PROFILE = {"name": "m-8k", "context_capacity": 8192, "output_reserve": 1024, "safety_margin": 256}


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTLOOM, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"COLUMNS": "200"} | env,
    )


def as_json(p: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(p.stdout)


@pytest.mark.spec("R17")
def test_help_everywhere_and_usage_errors_exit_2() -> None:
    cmds = [[], ["policy"], ["dlq"], ["topics"], ["session"], ["keys"], ["migrate"]]
    # Nine processes, two at a time: each is mostly its interpreter's start-up.
    with ThreadPoolExecutor(2) as pool:
        helps = list(pool.map(lambda cmd: run(*cmd, "--help"), cmds))
        usage = list(pool.map(lambda args: run(*args), [["policy", "validate"], ["no-such"]]))
    for cmd, p in zip(cmds, helps, strict=True):
        assert p.returncode == 0, (cmd, p.stderr)
        assert "Usage" in p.stdout
    assert usage[0].returncode == 2  # missing FILE
    assert usage[1].returncode == 2  # no such command


@pytest.mark.spec("R17", "R7.7")
def test_policy_validate_and_preview(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"compaction": {"user_turns": 20}}))
    bad = tmp_path / "bad.yaml"
    bad.write_text("compaction:\n  context_ratio: 1.5\n  user_turns: 0\nbogus: 1\n")
    assert run("policy", "validate", str(good)).returncode == 0
    p = run("policy", "validate", str(bad), "--json")
    assert p.returncode == 2
    assert [(i["details"]["path"], i["details"]["rule"]) for i in as_json(p)["issues"]] == [
        ("bogus", "unknown_field"),
        ("compaction.context_ratio", "ratio_range"),
        ("compaction.user_turns", "positive_integer"),
    ]
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(PROFILE))
    p = run("policy", "preview", str(good), "--model-profile", str(profile), "--json")
    assert p.returncode == 0, p.stderr
    doc = as_json(p)
    assert doc["provenance"]["compaction.user_turns"] == "override"
    assert doc["provenance"]["compaction.context_ratio"] == "default"
    action = next(r for r in doc["budgets"] if r["purpose"] == "action")
    assert (action["input_budget"], action["context_trigger_tokens"]) == (6912, 5530)
    assert (action["target_tokens"], action["user_turns"]) == (4148, 20)
    assert (action["cache_expired_tokens"], action["cache_ttl_s"]) == (4148, 300)
    table = run("policy", "preview", str(good), "--model-profile", str(profile))
    assert table.returncode == 0 and "compaction.user_turns" in table.stdout
    assert "cache_expired at" in table.stdout and "4148 tok, 300 s idle" in table.stdout
    assert run("policy", "preview", str(bad), "--model-profile", str(profile)).returncode == 2
    # A profile file that is not one is a usage error, never a traceback.
    for broken in ("", "5"):
        (tmp_path / "broken.json").write_text(broken)
        p = run("policy", "preview", str(good), "--model-profile", str(tmp_path / "broken.json"))
        assert p.returncode == 2 and "Traceback" not in p.stdout + p.stderr, p.stderr


@pytest.mark.spec("R17", "R1.4")
def test_policy_publish_through_the_prepare_api(tmp_path: Path, services: Any) -> None:
    release = {
        "agent_id": "cli-agent",
        "instructions": "You are a test agent.",
        "model_profile": PROFILE,
        "context_policy": {"compaction": {"user_turns": 3}},
    }
    f = tmp_path / "release.json"
    f.write_text(json.dumps(release))
    rid = f"rel-cli-{uuid.uuid4().hex[:8]}"
    env = {"ALC_PREPARE_URL": services.prepare_url, "ALC_API_KEY": services.api_key}
    p = run("policy", "publish", str(f), "--release-id", rid, "--json", **env)
    assert p.returncode == 0, p.stderr + p.stdout
    assert as_json(p)["release_id"] == rid
    again = run("policy", "publish", str(f), "--release-id", rid, "--json", **env)
    assert as_json(again) == as_json(p)  # the same content: the same release
    f.write_text(json.dumps(release | {"instructions": "other"}))
    refused = run("policy", "publish", str(f), "--release-id", rid, "--json", **env)
    assert refused.returncode == 1
    assert as_json(refused)["error"]["details"]["status"] == 409
    f.write_text(json.dumps(release | {"context_policy": {"compaction": {"user_turns": 0}}}))
    assert run("policy", "publish", str(f), "--release-id", rid, **env).returncode == 2


def test_migrate_and_topics_check(stack: Stack, pg_dsn: str) -> None:
    p = run("migrate", "--json", ALC_PG_DSN=pg_dsn)
    assert p.returncode == 0, p.stderr
    assert as_json(p)["latest"] > 0
    assert as_json(run("migrate", "--json", ALC_PG_DSN=pg_dsn))["applied"] == []
    p = run("topics", "check", "--json", ALC_KAFKA_BOOTSTRAP=stack.kafka_bootstrap)
    assert p.returncode == 0, p.stderr
    assert "ctx.deadletter" in as_json(p)["topics"]


async def test_dlq_list_show_and_replay(stack: Stack, pg_dsn: str) -> None:
    tag = uuid.uuid4().hex[:8]
    dlq, source = f"cli-dlq-{tag}", f"cli-src-{tag}"
    admin = AIOKafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap, **auth())
    await admin.start()
    try:
        await admin.create_topics([NewTopic(dlq, 2, 1), NewTopic(source, 1, 1)])
    finally:
        await admin.close()
    own = {n: f"cli-{n}-{tag}" for n in ("topic_committed", "topic_compaction_requests",
                                          "topic_observability", "processor_id")}  # fmt: skip
    made(Settings(topic_dead_letter=dlq, topic_records=source, **own))  # deleted at the end
    # A context event with a well-formed envelope (issue 38: nothing else is replayed),
    # for a session this database does not hold.
    original = encode_event(make_event(RecordKind.USER_INPUT, f"ek-{tag}", session="ses-1"))
    envelope = [("alc-signer", b"key:" + b"0" * 16), ("alc-sig", b"a" * 64)]
    prod = AIOKafkaProducer(bootstrap_servers=stack.kafka_bootstrap, **auth())
    await prod.start()
    try:
        # Issue 25 (finding 8): a letter is replayed only when the records topic holds
        # its bytes at the offset it names; the original goes back with its headers.
        at = await prod.send_and_wait(source, original, key=b"ses-1", headers=envelope)
        letter = DeadLetter(
            "invalid_event", "bad", source, 0, at.offset, b"ses-1", original, "ses-1", "ek-1",
            1_700_000_000,
        )  # fmt: skip
        await prod.send_and_wait(dlq, encode_dead_letter(letter), key=b"ses-1", partition=1)
    finally:
        await prod.stop()
    await apply_dsn(pg_dsn)  # the replay's audit table (migration 021)
    env = {
        "ALC_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
        "ALC_TOPIC_DEAD_LETTER": dlq,
        "ALC_TOPIC_RECORDS": source,
        "ALC_PG_DSN": pg_dsn,
    }
    # The cli principal may read these topics (its ACLs follow the configured names).
    await provision(Settings(topic_dead_letter=dlq, topic_records=source))
    listed = as_json(run("dlq", "list", "--json", **env))["letters"]
    assert [(x["ref"], x["reason_code"], x["source"]) for x in listed] == [
        ("1:0", "invalid_event", f"{source}:0:{at.offset}")
    ]
    shown = run("dlq", "show", "1:0", "--json", **env)
    assert as_json(shown)["value_head"] == original[:64].hex()
    assert run("dlq", "show", "0:5", **env).returncode == 1
    assert run("dlq", "replay", **env).returncode == 2  # nothing named
    # The processor would dead-letter it again (no such session): said, and not sent.
    p = run("dlq", "replay", "1:0", "--json", **env)
    assert (p.returncode, as_json(p)["replayed"]) == (1, []), p.stderr
    [result] = as_json(p)["results"]
    assert (result["outcome"], result["code"], result["expected"]) == (
        "refused",
        "unknown_session",
        "refuse",
    )
    cons = AIOKafkaConsumer(bootstrap_servers=stack.kafka_bootstrap, **auth())
    await cons.start()
    try:
        tp = TopicPartition(source, 0)
        cons.assign([tp])
        await cons.seek_to_beginning(tp)
        got: list[Any] = []
        for _ in range(10):  # the first fetches may return nothing while metadata loads
            got += (await cons.getmany(tp, timeout_ms=2_000)).get(tp, [])
            if got:
                break
    finally:
        await cons.stop()
    assert [(m.key, m.value, list(m.headers)) for m in got] == [(b"ses-1", original, envelope)]


def test_session_inspect_of_an_unknown_session_fails(services: Services, pg_dsn: str) -> None:
    # ``services`` migrates the fresh database: an unknown session, not a missing table.
    p = run("session", "inspect", "ses-none", "--json", ALC_PG_DSN=pg_dsn)
    assert p.returncode == 1
    assert as_json(p)["error"]["code"] == "not_found"


@pytest.mark.spec("R18", "R4.2", "R11.7", "R10.3")
async def test_session_inspect_shows_the_same_view_as_the_inspector(
    services: Any, db: Any, pg_dsn: str
) -> None:
    """A session whose first question was summarized: the call's blocks with role,
    category, retention, tokens, decision and reason, and the summary chain with its
    covered ranges — the view stored with the call (``storage.calls.views``), as the
    console shows it."""
    async with client(services) as c:
        sid, call_id, source = await summarized_call(c, db)
    stored = await call_views.view_of(db, sid, call_id)
    assert stored is not None
    expected = json.loads(json.dumps(stored.to_dict()))
    listed = as_json(run("session", "inspect", sid, "--json", ALC_PG_DSN=pg_dsn))
    numbers = {c["call_id"]: i for i, c in enumerate(listed["calls"], 1)}
    assert call_id in numbers
    by_number = run(
        "session", "inspect", sid, "--call", str(numbers[call_id]), "--json", ALC_PG_DSN=pg_dsn
    )
    assert by_number.returncode == 0, by_number.stderr
    got = as_json(by_number)["call"]
    assert got == expected  # the one view, whichever way it is asked for
    blocks = {b["block_id"]: b for b in got["blocks"]}
    summary = got["chain"][0]
    assert blocks[f"summary:{summary['summary_id']}"]["reason"] == "history_summary"
    covered = blocks[f"rec:{source}"]
    assert (covered["role"], covered["category"], covered["retention"]) == (
        None,  # not sent: the summary stands for it
        "history",
        "compressible",
    )
    assert (covered["decision"], covered["reason"]) == ("summarized", "covered_by_summary")
    assert covered["tokens"] > 0
    assert source in summary["covered_record_ids"] and summary["covered_ranges"]
    table = run("session", "inspect", sid, "--call", call_id, ALC_PG_DSN=pg_dsn)
    assert table.returncode == 0, table.stderr
    for text in ("blocks in order", "covered_by_summary", "summary chain", summary["summary_id"]):
        assert text in table.stdout
    first, last = summary["covered_ranges"][0]
    assert f"{first}-{last}" in table.stdout
    missing = run("session", "inspect", sid, "--call", "999", "--json", ALC_PG_DSN=pg_dsn)
    assert (missing.returncode, as_json(missing)["error"]["code"]) == (1, "not_found")


@pytest.mark.spec("R18", "R4.4")
async def test_session_inspect_shows_the_plan_and_the_constraints_of_a_call(
    services: Any, db: Any, pg_dsn: str
) -> None:
    async def frontier(c: Any, run_: Any) -> None:
        await c.set_constraint(run_, "Never push to main.", constraint_id="no-push")
        steps = [{"id": "p1", "step": "answer question b", "status": "in_progress"}]
        await c.update_plan(run_, steps, "plan:b")

    async with client(services) as c:
        sid, call_id, _ = await summarized_call(c, db, before_call=frontier)
    got = as_json(run("session", "inspect", sid, "--call", call_id, "--json", ALC_PG_DSN=pg_dsn))
    f = got["call"]["frontier"]
    assert (f["plan_version"], f["constraints_version"]) == (1, 1)
    assert f["plan"]["items"][0]["text"] == "answer question b"
    assert f["constraints"][0]["constraint_id"] == "no-push"
    table = run("session", "inspect", sid, "--call", call_id, ALC_PG_DSN=pg_dsn)
    assert table.returncode == 0, table.stderr
    for text in ("plan v1", "1. [in_progress] answer question b (p1)", "- Never push to main."):
        assert text in table.stdout, table.stdout
