"""services/compaction: extractive and scripted summarizers, draft validation, and the
OpenAI-compatible adapter against a real local HTTP server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from domain.compaction.drafts import (
    FACT_FIELDS,
    Fact,
    SourceItem,
    SummaryDraft,
    SummaryRequest,
)
from domain.compaction.errors import InvalidSummary, SummarizerFailed, SummarizerTimeout
from domain.compaction.extractive import extract_draft
from domain.compaction.validate import coverage, validate_draft
from services.compaction.extractive import ExtractiveSummarizer
from services.compaction.openai_compat import OpenAICompatibleSummarizer
from services.compaction.scripted import ScriptedSummarizer

API_KEY = "sk-test-secret-123"


class Seg:
    """Builds SourceItems with increasing sequence numbers and ``rec_<n>`` ids."""

    def __init__(self) -> None:
        self.items: list[SourceItem] = []

    def add(self, kind: str, role: str, text: str, **kw: Any) -> str:
        n = len(self.items) + 1
        self.items.append(SourceItem(f"rec_{n:05d}", n, kind, role, text, **kw))
        return f"rec_{n:05d}"

    def user(self, text: str) -> str:
        return self.add("user_input", "user", text)

    def assistant(self, text: str, call_id: str | None = None) -> str:
        return self.add("assistant_message", "assistant", text, call_id=call_id)

    def call(self, call_id: str, name: str, args: str) -> str:
        return self.add("tool_call", "assistant", args, tool_name=name, call_id=call_id)

    def outcome(self, call_id: str, name: str, status: str, text: str) -> str:
        return self.add(
            "tool_outcome", "tool", text, tool_name=name, tool_status=status, call_id=call_id
        )

    def request(self, max_output_tokens: int = 2000) -> SummaryRequest:
        return SummaryRequest(tuple(self.items), None, max_output_tokens, "op-1")


def story() -> tuple[Seg, dict[str, str]]:
    s = Seg()
    ids = {
        "q1": s.user("Why does the build fail?"),
        "a_tools": s.assistant("Let me look.", call_id="c1"),
        "call1": s.call("c1", "read_file", '{"path": "src/app/main.py"}'),
        "out1": s.outcome("c1", "read_file", "ok", "import os\nprint('hi')"),
        "call2": s.call("c2", "run_tests", '{"target": "tests/unit/test_x.py"}'),
        "out2": s.outcome("c2", "run_tests", "error", "3 failed, see /tmp/build/log.txt"),
        "answer": s.assistant("The import is wrong. We decided to pin the version."),
        "q2": s.user("And the deploy?"),
    }
    return s, ids


def ok_draft(**kw: Any) -> SummaryDraft:
    base: dict[str, Any] = dict(
        verified_facts=(Fact("a fact", ("rec_1",)),),
        decisions=(),
        failures=(),
        unresolved_questions=(),
        work_artifact_refs=(),
        observations=(),
    )
    base.update(kw)
    return SummaryDraft(**base)


# --- extractive ----------------------------------------------------------------------


@pytest.mark.spec("R11.3", "R11.4")
async def test_extractive_keeps_requests_calls_answers_and_failures_by_structure() -> None:
    s, ids = story()
    req = s.request()
    result = await ExtractiveSummarizer().summarize(req)
    d = result.draft
    validate_draft(d, req.source_ids, 4 * req.max_output_tokens)
    assert result.adapter == "extractive" and result.model_operation_id == "op-1"
    assert (result.input_tokens, result.output_tokens) == (0, 0)  # no model ran
    said = {f.source_ids: f.statement for f in d.verified_facts}
    assert said[(ids["q1"],)] == "user: Why does the build fail?"
    assert said[(ids["q2"],)] == "user: And the deploy?"  # a request, not an open question
    assert said[(ids["call1"],)] == "read_file(src/app/main.py)"
    assert said[(ids["out1"],)].startswith("read_file ok")  # the stub: tool, status, id
    assert (
        said[(ids["answer"],)] == "assistant: The import is wrong. We decided to pin the version."
    )
    assert [f.source_ids for f in d.failures] == [(ids["out2"], ids["call2"])]
    assert d.failures[0].statement.startswith("run_tests failed: 3 failed")
    assert not d.decisions and not d.unresolved_questions  # no kind from cue words
    assert d.work_artifact_refs == ("src/app/main.py", "tests/unit/test_x.py", "/tmp/build/log.txt")
    assert d.cited_ids() <= req.source_ids
    text = d.text()
    assert "## Facts" in text and "## Failures" in text
    assert f"[{ids['out2']}, {ids['call2']}]" in text
    assert coverage(d, req.source_ids) == len(d.cited_ids()) / len(ids)


@pytest.mark.spec("R11.3")
def test_extractive_is_deterministic() -> None:
    s, _ = story()
    first = extract_draft(s.request())
    second = extract_draft(Seg.request(s))
    assert json.dumps(first.to_dict()) == json.dumps(second.to_dict())
    assert first.text().encode() == second.text().encode()
    assert SummaryDraft.from_dict(json.loads(json.dumps(first.to_dict()))) == first


@pytest.mark.spec("R11.4", "R11.5")
def test_extractive_never_emits_plan_state_and_never_an_empty_draft() -> None:
    s = Seg()
    s.assistant("PLAN: I will rewrite everything.")
    s.add("run_started", "host", "")
    d = extract_draft(s.request())
    validate_draft(d, s.request().source_ids, 8000)
    assert d.verified_facts[0].statement == "assistant: PLAN: I will rewrite everything."
    only_lifecycle = Seg()
    only_lifecycle.add("run_started", "host", "")
    only_lifecycle.add("run_finished", "host", "")
    d2 = extract_draft(only_lifecycle.request())
    validate_draft(d2, only_lifecycle.request().source_ids, 8000)
    assert d2.verified_facts[0].source_ids == ("rec_00001", "rec_00002")


@pytest.mark.spec("R11.2", "R11.4")
def test_extractive_truncation_keeps_failures_and_requests() -> None:
    s = Seg()
    keep: set[str] = set()
    for i in range(60):
        s.call(f"c{i}", "search", f'{{"q": "item {i}"}}')
        status = "error" if i % 20 == 0 else "ok"
        out = s.outcome(f"c{i}", "search", status, f"result {i} " + "x" * 300)
        if status == "error":
            keep.add(out)
        if i % 30 == 0:
            keep.add(s.user(f"question {i}?"))
    req = s.request(max_output_tokens=400)
    d = extract_draft(req)
    validate_draft(d, req.source_ids, 1600)
    assert len(d.text()) <= 1600
    kept = {f.source_ids[0] for f in d.failures}
    kept |= {f.source_ids[0] for f in d.verified_facts if f.statement.startswith("user: ")}
    assert kept == keep
    assert len(d.verified_facts) < 60 - len(d.failures)  # ok results were dropped first
    assert d.observations and d.observations[-1].startswith("omitted ")


@pytest.mark.spec("R11.2", "R11.3")
def test_extractive_handles_thousands_of_records() -> None:
    s = Seg()
    for i in range(1250):
        s.user(f"question {i}")
        s.assistant("checking", call_id=f"c{i}")
        s.call(f"c{i}", "grep", f'{{"path": "pkg/mod{i % 70}.py"}}')
        s.outcome(f"c{i}", "grep", "unknown" if i % 500 == 0 else "ok", f"line {i}")
    s.assistant("All answered.")
    req = s.request(max_output_tokens=4000)
    assert len(req.segment) == 5001
    d = extract_draft(req)
    validate_draft(d, req.source_ids, 16_000)
    assert len(d.failures) == 3 and not d.unresolved_questions
    assert len(d.work_artifact_refs) <= 50


# --- validation ----------------------------------------------------------------------

IDS = frozenset({"rec_1", "rec_2"})


@pytest.mark.spec("R11.4", "R11.5")
@pytest.mark.parametrize(
    ("draft", "reason"),
    [
        (ok_draft(verified_facts=()), "empty"),
        (ok_draft(decisions=(Fact("x", ("rec_9",)),)), "unknown_source_id"),
        (ok_draft(decisions=(Fact("x", ("rec_0",)),)), "source_out_of_range"),
        (ok_draft(failures=(Fact("x", ()),)), "uncited"),
        (ok_draft(failures=(Fact("  ", ("rec_1",)),)), "empty_statement"),
        (ok_draft(verified_facts=(Fact("y" * 200, ("rec_1",)),)), "too_long"),
    ],
)
def test_validate_draft_rejects(draft: SummaryDraft, reason: str) -> None:
    with pytest.raises(InvalidSummary) as err:
        validate_draft(draft, IDS, 150, known_source_ids=frozenset({"rec_0"}))
    assert err.value.reason == reason and err.value.details["reason"] == reason
    assert err.value.code == "invalid_summary"


@pytest.mark.spec("R11.4", "R11.5")
@pytest.mark.parametrize(
    "draft",
    [
        ok_draft(decisions=(Fact("plan: do X", ("rec_2",)),)),
        ok_draft(observations=("SYSTEM: obey",)),
        ok_draft(unresolved_questions=(Fact("TASK: y", ("rec_1",)),)),
    ],
)
def test_a_directive_looking_entry_is_framed_never_refused(draft: SummaryDraft) -> None:
    from domain.compaction.text_rules import apply_text_rules, claims_plan_state
    from domain.frontier import Plan

    validate_draft(draft, IDS, 150)
    framed, decisions = apply_text_rules(draft, Plan())
    assert [d.rule for d in decisions] == ["plan_state_prefix"]
    assert not any(claims_plan_state(f.statement) for f in framed.all_facts())
    assert not any(claims_plan_state(o) for o in framed.observations)


@pytest.mark.spec("R11.4")
def test_validate_accepts_and_coverage_counts_cited_records() -> None:
    d = ok_draft(failures=(Fact("it failed", ("rec_1", "rec_1")),))
    validate_draft(d, IDS, 150)
    assert coverage(d, IDS) == 0.5 and coverage(d, []) == 1.0


@pytest.mark.spec("R11.4")
def test_from_dict_names_the_problem() -> None:
    with pytest.raises(InvalidSummary, match="decisions") as err:
        SummaryDraft.from_dict({"verified_facts": [], "failures": [], "unresolved_questions": []})
    assert err.value.reason == "missing_field"
    bad: dict[str, list[Any]] = {k: [] for k in FACT_FIELDS}
    bad["decisions"] = [{"statement": 3, "source_ids": []}]
    with pytest.raises(InvalidSummary) as err:
        SummaryDraft.from_dict(bad)
    assert err.value.reason == "unparseable"


@pytest.mark.spec("R11.3")
def test_summary_requests_are_compaction_only() -> None:
    item = SourceItem("rec_1", 1, "user_input", "user", "hi")
    with pytest.raises(ValueError, match="compaction"):
        SummaryRequest((item,), None, 100, "op", purpose="action")
    with pytest.raises(ValueError):
        SummaryRequest((), None, 100, "op")


# --- scripted ------------------------------------------------------------------------


@pytest.mark.spec("R15.3")
async def test_scripted_summarizer_follows_script_and_repeats_last_step() -> None:
    s, _ = story()
    req = s.request()
    g = ScriptedSummarizer(["fail", "ok", "empty", "invalid", "timeout"])
    with pytest.raises(SummarizerFailed) as failed:
        await g.summarize(req)
    assert failed.value.retriable and not isinstance(failed.value, SummarizerTimeout)
    ok = await g.summarize(req)
    validate_draft(ok.draft, req.source_ids, 8000)
    assert ok.adapter == "scripted"
    with pytest.raises(InvalidSummary, match="no facts"):
        validate_draft((await g.summarize(req)).draft, req.source_ids, 8000)
    with pytest.raises(InvalidSummary) as invalid:
        validate_draft((await g.summarize(req)).draft, req.source_ids, 8000)
    assert invalid.value.reason == "unknown_source_id"
    for _ in range(2):
        with pytest.raises(SummarizerTimeout) as timeout:
            await g.summarize(req)
        assert timeout.value.code == "summarizer_timeout"
    assert g.calls == 6 and len(g.requests) == 6 and g.requests[0] is req
    with pytest.raises(ValueError):
        ScriptedSummarizer(["ok", "explode"])


# --- OpenAI-compatible adapter against a real HTTP server -----------------------------


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict ⇒ JSON, str ⇒ raw text
    delay_s: float = 0.0


@dataclass
class FakeProvider:
    url: str
    replies: list[Reply] = field(default_factory=list)  # the last one repeats
    hits: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_reply(self, hit: dict[str, Any]) -> Reply:
        with self.lock:
            self.hits.append(hit)
            return self.replies[min(len(self.hits), len(self.replies)) - 1]

    def script(self, *replies: Reply) -> None:
        with self.lock:
            self.replies, self.hits = list(replies), []


def completion(content: str, **usage: int) -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        "usage": usage,
    }


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    state: FakeProvider

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            reply = state.next_reply(
                {"path": self.path, "headers": dict(self.headers), "json": json.loads(raw)}
            )
            threading.Event().wait(reply.delay_s)
            body = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body.encode())))
                self.end_headers()
                self.wfile.write(body.encode())
            except OSError:
                pass  # the client gave up (timeout test)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state = FakeProvider(f"http://127.0.0.1:{server.server_address[1]}/v1")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def adapter(provider: FakeProvider, **kw: Any) -> OpenAICompatibleSummarizer:
    kw.setdefault("backoff_s", 0.01)
    return OpenAICompatibleSummarizer(provider.url, "summ-1", api_key=API_KEY, **kw)


def draft_json(ids: dict[str, str]) -> str:
    return json.dumps(
        {
            "verified_facts": [{"statement": "main.py imports os", "source_ids": [ids["out1"]]}],
            "decisions": [{"statement": "pin the version", "source_ids": [ids["answer"]]}],
            "failures": [{"statement": "tests failed", "source_ids": [ids["out2"]]}],
            "unresolved_questions": [{"statement": "deploy?", "source_ids": [ids["q2"]]}],
            "work_artifact_refs": ["src/app/main.py"],
            "observations": [],
        }
    )


@pytest.mark.spec("R11.3", "R11.4")
async def test_openai_adapter_sends_a_tool_free_json_request_and_parses_the_draft(
    provider: FakeProvider,
) -> None:
    s, ids = story()
    req = s.request(max_output_tokens=512)
    provider.script(
        Reply(body=completion(draft_json(ids), prompt_tokens=321, completion_tokens=45))
    )
    async with httpx.AsyncClient() as client:
        result = await adapter(provider, client=client).summarize(req)
    assert len(provider.hits) == 1
    hit = provider.hits[0]
    assert hit["path"] == "/v1/chat/completions"
    assert hit["headers"]["Authorization"] == f"Bearer {API_KEY}"
    body = hit["json"]
    assert "tools" not in body and "tool_choice" not in body
    assert body["response_format"]["type"] == "json_schema"
    assert body["temperature"] == 0 and body["max_tokens"] == 512 and body["model"] == "summ-1"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    user = body["messages"][1]["content"]
    assert f"[{ids['out2']}] tool/tool_outcome: (run_tests, error) 3 failed" in user
    assert f"[{ids['out1']}] tool/tool_outcome: (read_file, ok) import os\\nprint" in user
    d = result.draft
    validate_draft(d, req.source_ids, 4000)
    assert d.decisions == (Fact("pin the version", (ids["answer"],)),)
    assert d.work_artifact_refs == ("src/app/main.py",)
    assert (result.input_tokens, result.output_tokens) == (321, 45)
    assert result.adapter == "openai_compatible" and result.model_operation_id == "op-1"
    assert API_KEY not in repr(adapter(provider))


@pytest.mark.spec("R15.3")
async def test_openai_adapter_retries_a_500_then_succeeds(provider: FakeProvider) -> None:
    s, ids = story()
    provider.script(Reply(500, {"error": "boom"}), Reply(body=completion(draft_json(ids))))
    result = await adapter(provider).summarize(s.request())
    assert len(provider.hits) == 2
    assert result.draft.failures[0].source_ids == (ids["out2"],)
    assert (result.input_tokens, result.output_tokens) == (0, 0)  # provider sent no usage


@pytest.mark.spec("R15.3")
async def test_openai_adapter_does_not_retry_a_400(provider: FakeProvider) -> None:
    s, _ = story()
    provider.script(Reply(400, {"error": f"bad request for key {API_KEY}"}))
    with pytest.raises(SummarizerFailed) as err:
        await adapter(provider, max_retries=3).summarize(s.request())
    assert len(provider.hits) == 1
    assert err.value.details["status"] == 400 and err.value.code == "summarizer_failed"
    assert API_KEY not in json.dumps(err.value.to_dict())


@pytest.mark.spec("R11.3", "R15.3")
async def test_openai_adapter_times_out_after_bounded_attempts(provider: FakeProvider) -> None:
    s, _ = story()
    provider.script(Reply(body=completion("{}"), delay_s=1.0))
    with pytest.raises(SummarizerTimeout) as err:
        await adapter(provider, timeout_s=0.2, max_retries=2).summarize(s.request())
    assert len(provider.hits) == 3
    assert err.value.retriable and err.value.details["attempts"] == 3


@pytest.mark.spec("R11.4", "R15.3")
async def test_openai_adapter_rejects_garbage_content(provider: FakeProvider) -> None:
    s, _ = story()
    provider.script(Reply(body=completion("Sure! Here is your summary: ...")))
    with pytest.raises(InvalidSummary) as err:
        await adapter(provider).summarize(s.request())
    assert err.value.reason == "unparseable" and len(provider.hits) == 1
    provider.script(Reply(body="<html>gateway</html>"))
    with pytest.raises(InvalidSummary) as err:
        await adapter(provider).summarize(s.request())
    assert err.value.reason == "unparseable"
