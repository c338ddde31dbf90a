"""The built-in summarizer's selection rules (issue 16): decisions however phrased,
salient lines of tool output wherever they sit, the paths tool calls touched, a budget
that holds in real tokens, source ids on every line, roll-ups. Pure."""

from __future__ import annotations

import json

import pytest

from domain.compaction.bound import rollup_items
from domain.compaction.drafts import Fact, SourceItem, SummaryDraft, SummaryRequest
from domain.compaction.extractive import MAX_ARTIFACT_REFS, extract_draft
from domain.compaction.sources import source_items
from domain.compaction.validate import validate_draft
from domain.context.rendering import RecordView
from domain.context.selection import Group, Segment
from services.compaction.wording import SYSTEM_PROMPT, render_segment
from storage.tokenizers import make_counter

COUNT = make_counter("cl100k_base").count


def rid(n: int) -> str:
    return f"rec_{n:032x}"  # the real shape: rec_ + 32 hex digits


class Seg:
    """SourceItems as ``sources.source_items`` builds them: tool calls ride on the assistant
    message (``arguments``), outcomes carry the tool name and status."""

    def __init__(self) -> None:
        self.items: list[SourceItem] = []
        self.calls = 0

    def _add(self, kind: str, role: str, text: str, **kw: object) -> str:
        n = len(self.items) + 1
        self.items.append(SourceItem(rid(n), n, kind, role, text, **kw))  # type: ignore[arg-type]
        return rid(n)

    def user(self, text: str) -> str:
        return self._add("user_input", "user", text)

    def step(self, text: str, *calls: tuple[str, dict[str, object]]) -> tuple[str, list[str]]:
        ids = []
        for _ in calls:
            self.calls += 1
            ids.append(f"c{self.calls}")
        args = tuple((name, json.dumps(a)) for name, a in calls)
        record = self._add(
            "assistant_message", "assistant", text, call_id=ids[0] if ids else None, arguments=args
        )
        return record, ids

    def answer(self, text: str) -> str:
        return self._add("assistant_message", "assistant", text)

    def outcome(self, call_id: str, name: str, text: str, status: str = "ok") -> str:
        return self._add(
            "tool_outcome", "tool", text, tool_name=name, tool_status=status, call_id=call_id
        )

    def request(self, max_output_tokens: int = 800) -> SummaryRequest:
        return SummaryRequest(tuple(self.items), None, max_output_tokens, "op-1")


def draft_of(s: Seg, cap: int = 800) -> SummaryDraft:
    req = s.request(cap)
    d = extract_draft(req)
    validate_draft(d, req.source_ids, 6 * cap)  # the worker's check (R11.4)
    return d


def line_with(d: SummaryDraft, needle: str) -> tuple[str, Fact]:
    for name, facts in d.sections():
        for f in facts:
            if needle in f.statement:
                return name, f
    raise AssertionError(f"{needle!r} not in\n{d.text()}")


# --- decisions, however phrased: kept as said, by structure ----------------------------

PHRASINGS = [
    "I'll pin urllib3 to 1.26.18.",
    "Let's move the retry into reconcile_batch().",
    "Decision: drop the legacy_export flag.",
    "We decided to cache the FX rates for 15 minutes.",
    "I'm going to raise LEDGER_SYNC_TIMEOUT to 45.",
    "We should split build_index() into two passes.",
    "Switching the queue to the priority lane for PAY-4821.",
    "We will keep the old code path behind EXPORT_V2.",
    "Final call: orjson over json.",  # no cue word at all
    "Settled: the export runs nightly.",
]


@pytest.mark.spec("R11.4")
@pytest.mark.parametrize("sentence", PHRASINGS)
def test_a_decision_in_any_phrasing_is_kept_verbatim_citing_its_record(sentence: str) -> None:
    """Issue 36: a step's prose is on the floor whatever its wording; no cue word moves
    it to a section of its own (only the author's records are decisions)."""
    s = Seg()
    s.user("Why is the ledger sync slow?")
    step, (call,) = s.step(f"Looking at the loader. {sentence}", ("read_file", {"path": "a/b.py"}))
    s.outcome(call, "read_file", "x = 1")
    s.answer("Done.")
    section, line = line_with(draft_of(s), sentence)
    assert section == "verified_facts" and line.source_ids == (step,)
    assert "read_file(a/b.py)" in line.statement  # the step's call on its line


@pytest.mark.spec("R11.4")
def test_every_sentence_of_an_answer_is_kept_not_only_the_first() -> None:
    s = Seg()
    q = s.user("What do we do about the flaky export?")
    text = " ".join(["The export fails under load.", *PHRASINGS[:4]])
    answer = s.answer(text)
    d = draft_of(s)
    _, line = line_with(d, text)
    assert line.source_ids == (answer,)
    _, asked = line_with(d, "user: What do we do")
    assert asked.source_ids == (q,)


@pytest.mark.spec("R11.4")
def test_when_the_bound_binds_calls_outlast_narration() -> None:
    """Issue 36: "I will now use curl…" narration crowded out the commands that mattered;
    the floor drops a step's prose before its calls."""
    s = Seg()
    s.user("Fix it.")
    for n in range(40):
        _, (call,) = s.step(
            f"Let me check how this is wired. The culprit is flush_batch_{n}() in worker {n}.",
            ("bash", {"command": f"make test TARGET=flush_{n}"}),
        )
        s.outcome(call, "bash", "")
    d = draft_of(s, cap=400)
    text = d.text()
    assert text.count('bash("make test TARGET=flush_') >= 8
    assert "TARGET=flush_39" in text  # the newest
    assert text.count("Let me check how this is wired") < 8


# --- salient lines of tool output --------------------------------------------------------


def bench_output(p99: str) -> str:
    rows = [f"case-{i:02d}  p50 {10 + i}.4 ms  p95 {40 + i}.1 ms" for i in range(12)]
    return "\n".join(["bench ledger-sync: 5 runs, warm cache", "-" * 40, *rows, p99])


@pytest.mark.spec("R11.4")
def test_a_fact_past_the_first_160_characters_of_a_result_is_kept() -> None:
    s = Seg()
    s.user("How fast is the sync now?")
    _, (call,) = s.step("Running the benchmark.", ("bash", {"command": "python bench.py"}))
    out = bench_output("total throughput 1,842 req/s over 60 s, p99 412.7 ms")
    assert out.index("412.7 ms") > 160
    result = s.outcome(call, "bash", out)
    s.answer("It is faster.")
    _, line = line_with(draft_of(s, cap=300), "412.7 ms")
    assert result in line.source_ids


@pytest.mark.spec("R11.4")
def test_the_error_line_outranks_a_flood_of_alike_log_lines() -> None:
    s = Seg()
    s.user("Why does the worker retry?")
    _, (call,) = s.step("Reading the logs.", ("bash", {"command": "kubectl logs deploy/x"}))
    logs = [
        f"2024-05-0{1 + i % 9}T10:{i % 60:02d}:03Z INFO ledger.sync: flush batch ok in {i}ms"
        for i in range(80)
    ]
    logs.insert(57, "2024-05-07T10:41:07Z ERROR ledger.sync: LEDGER_E4127 currency mismatch")
    result = s.outcome(call, "bash", "\n".join(logs))
    s.answer("See the logs.")
    d = draft_of(s, cap=200)
    _, line = line_with(d, "LEDGER_E4127 currency mismatch")
    assert result in line.source_ids
    assert d.text().count(" INFO ") <= 1


@pytest.mark.spec("R11.4")
def test_a_test_failure_keeps_the_error_and_the_frame_before_it_not_the_progress() -> None:
    s = Seg()
    s.user("Why do the tests fail?")
    _, (call,) = s.step("Running the tests.", ("run_tests", {"target": "tests/unit/test_l.py"}))
    out = "\n".join(
        [
            "============================= test session starts ==============================",
            "collected 120 items",
            *[f"tests/unit/test_{i}.py " + "." * 50 + f" [{i * 9}%]" for i in range(1, 10)],
            "src/ledger/sync.py:88: in reconcile_batch",
            "    return rates[key]",
            "E       KeyError: 'currency_code'",
            "==================== 1 failed, 119 passed in 41.27s ====================",
        ]
    )
    s.outcome(call, "run_tests", out)
    s.answer("A key is missing.")
    text = draft_of(s, cap=300).text()
    assert "KeyError: 'currency_code'" in text
    assert "src/ledger/sync.py:88" in text
    assert "119 passed in 41.27s" in text
    assert "%]" not in text and "=====" not in text


@pytest.mark.spec("R11.4")
def test_a_failed_call_is_kept_with_its_error_first() -> None:
    s = Seg()
    s.user("Load the config.")
    _, (call,) = s.step("Reading it.", ("read_file", {"path": "config/ledger.yaml"}))
    noise = "\n".join(f"Collecting package{i}" for i in range(30))
    out = s.outcome(call, "read_file", f"{noise}\nFileNotFoundError: config/ledger.yaml", "error")
    d = draft_of(s, cap=200)
    section, line = line_with(d, "FileNotFoundError: config/ledger.yaml")
    assert section == "failures" and line.statement.startswith("read_file failed")
    assert line.source_ids == (out,)
    assert line.statement.count("Collecting") <= 2  # the head and the line before the error


# --- the paths tool calls touched ---------------------------------------------------------


@pytest.mark.spec("R11.4")
def test_a_file_that_was_only_read_is_named_by_the_call_arguments() -> None:
    s = Seg()
    s.user("What does the loader do?")
    step, (call,) = s.step("", ("read_file", {"path": "src/billing/ledger_sync.py"}))
    s.outcome(call, "read_file", "def load():\n    return 1\n")
    s.answer("It loads.")
    d = draft_of(s)
    assert d.work_artifact_refs[0] == "src/billing/ledger_sync.py"
    _, line = line_with(d, "read_file(src/billing/ledger_sync.py)")
    assert line.source_ids == (step,)


@pytest.mark.spec("R11.4")
def test_the_path_list_is_short_and_ranks_touched_files_before_mentioned_ones() -> None:
    s = Seg()
    s.user("Where is the bug?")
    grep_hits = "\n".join(f"pkg/mod{i}/hit.py:{i}: x = y" for i in range(60))
    for n in range(14):
        _, (call,) = s.step(f"Step {n}.", ("read_file", {"path": f"src/touched/f{n}.py"}))
        s.outcome(call, "grep", grep_hits)
    s.answer("The bug is in lib/mentioned/only.py.")
    refs = draft_of(s, cap=1600).work_artifact_refs
    assert len(refs) <= MAX_ARTIFACT_REFS
    assert list(refs) == [f"src/touched/f{n}.py" for n in range(len(refs))]
    assert not any(r.startswith("pkg/mod") for r in refs)  # grep output does not flood it


@pytest.mark.spec("R11.4", "R15.4")
def test_worker_items_carry_the_calls_arguments_redacted() -> None:
    calls = [
        {"call_id": "c1", "name": "read_file", "arguments_json": '{"path": "src/a.py"}'},
        {"call_id": "c2", "name": "http", "arguments_json": '{"headers": "token=abcd1234xyz"}'},
    ]
    records = [
        RecordView("r1", 1, "run", "main", "assistant_message", "model", "Reading.",
                   {"tool_calls": calls}, 5),
        RecordView("r2", 2, "run", "main", "tool_outcome", "tool", "ok",
                   {"call_id": "c1", "name": "read_file", "status": "ok"}, 1),
        RecordView("r3", 3, "run", "main", "tool_call", "host", "",
                   {"call_id": "c3", "name": "grep", "arguments_json": '{"q": "x"}'}, 1),
    ]  # fmt: skip
    seg = Segment((Group(("r1", "r2", "r3"), 1, 3, 7, "interaction", True),), 7, False)
    items = source_items(seg, {r.record_id: r for r in records})
    assert items[0].arguments[0] == ("read_file", '{"path": "src/a.py"}')
    assert items[0].arguments[1][0] == "http" and "abcd1234xyz" not in items[0].arguments[1][1]
    assert items[0].call_id == "c1" and items[1].arguments == ()
    assert items[2].arguments == (("grep", '{"q": "x"}'),)


# --- budget, citations, roll-ups ------------------------------------------------------------


def busy_segment(n: int = 30) -> Seg:
    s = Seg()
    for k in range(n):
        s.user(f"Question {k}: why does job_{k} fail? Don't touch config/job_{k}.yaml.")
        _, (call,) = s.step(f"I'll check job_{k}.", ("read_file", {"path": f"src/jobs/job_{k}.py"}))
        s.outcome(call, "read_file", f"ERROR job_{k}: E{1000 + k} timeout after {k}.5 s\n" * 3)
        s.answer(f"job_{k} times out after {k}.5 s; we decided to raise JOB_{k}_TIMEOUT.")
    return s


@pytest.mark.spec("R11.2", "R11.4")
@pytest.mark.parametrize("cap", [200, 400, 800, 1600])
def test_the_draft_holds_its_cap_in_real_tokens_and_every_line_cites(cap: int) -> None:
    s = busy_segment()
    d = draft_of(s, cap)
    assert COUNT(d.text()) <= cap * 1.1  # ids and paths tokenize densely: estimated so
    ids = {i.record_id for i in s.items}
    assert all(f.source_ids and set(f.source_ids) <= ids for f in d.all_facts())


@pytest.mark.spec("R11.8", "R11.4")
def test_a_roll_up_keeps_sections_and_citations_and_drops_the_least_salient() -> None:
    first = draft_of(busy_segment(), 1600)
    items = rollup_items(first)
    rolled = extract_draft(SummaryRequest(items, None, 400, "op:rollup:0"))
    validate_draft(rolled, frozenset(i.record_id for i in items), 6 * 400)
    assert 0 < len(rolled.all_facts()) < len(first.all_facts())
    before = {f.source_ids[0]: name for name, fs in first.sections() for f in fs}
    for name, facts in rolled.sections():
        for f in facts:
            assert before[f.source_ids[0]] == name  # an entry keeps its section
    # within its budget a roll-up changes nothing but the notes
    again = extract_draft(SummaryRequest(rollup_items(rolled), None, 4000, "op:rollup:1"))
    assert [f.statement for f in again.all_facts()] == [f.statement for f in rolled.all_facts()]


@pytest.mark.spec("R11.3")
def test_same_segment_same_draft() -> None:
    a, b = draft_of(busy_segment(), 400), draft_of(busy_segment(), 400)
    assert a.text().encode() == b.text().encode()


# --- the OpenAI-compatible summarizer asks for the same ------------------------------------


@pytest.mark.spec("R11.3", "R11.4")
def test_the_model_sees_the_calls_and_is_asked_for_the_same_structure() -> None:
    s = Seg()
    s.user("What is in the loader?")
    step, (call,) = s.step("Reading.", ("read_file", {"path": "src/billing/ledger_sync.py"}))
    s.outcome(call, "read_file", "x = 1")
    rendered = render_segment(s.request())
    assert f'[{step}] assistant/assistant_message: Reading. → calls: read_file {{"path"' in rendered
    for phrase in ("Let's", "Decision:", "numbers with their units", "at most 10 file paths"):
        assert phrase in SYSTEM_PROMPT
