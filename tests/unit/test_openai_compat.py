"""The model summarizer asks for structure (issue 36, item 4): one prompt file with its
JSON schema, structured output with a graceful fallback, and answers read leniently —
off-schema, uncited, over-long, cut off or in another language — against the scripted
OpenAI-compatible server (``tests.support.model_server``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from domain.compaction.drafts import SourceItem, SummaryDraft, SummaryRequest
from domain.compaction.errors import InvalidSummary, SummarizerFailed
from domain.compaction.model_answer import SECTIONS, read_answer
from domain.compaction.validate import validate_draft
from services.compaction.openai_compat import RESPONSE_FORMATS, OpenAICompatibleSummarizer
from services.compaction.wording import ANSWER_SCHEMA, PROMPT_FILE, SYSTEM_PROMPT
from services.summarizers.answer import ModelSummaryResult
from storage.tokenizers import make_counter
from tests.support.model_server import Script, model_server

Reply = tuple[int, dict[str, Any] | str]
MAX_CHARS_PER_TOKEN = 6  # what the job's validation allows (services/compaction/summarize.py)
COUNT = make_counter("cl100k_base").count  # the adapter's default: the jobs' tokenizer


def rid(n: int) -> str:
    return f"rec_{n:032x}"  # the real shape, which the scripted server recognizes


def segment() -> tuple[SourceItem, ...]:
    return (
        SourceItem(rid(1), 1, "user_input", "user", "Fix the flaky login test, keep Python 3.11"),
        SourceItem(rid(2), 2, "assistant_message", "assistant", "Running the tests.", call_id="c1"),
        SourceItem(
            rid(3), 3, "tool_outcome", "tool", "FAILED test_login: Timeout", "run_tests", "error"
        ),
        SourceItem(rid(4), 4, "assistant_message", "assistant", "Retry with a 5 s wait instead."),
        SourceItem(rid(5), 5, "user_input", "user", "Should we also fix CI?"),
    )


def request(max_output_tokens: int = 2000) -> SummaryRequest:
    return SummaryRequest(segment(), None, max_output_tokens, "op-1")


def completion(content: str, finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "choices": [
            {
                "index": 0,
                "finish_reason": finish_reason,
                "message": {"role": "assistant", "content": content},
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20},
    }


def structured() -> dict[str, Any]:
    return {
        "requests": [
            {"text": "Fix the flaky login test, keep Python 3.11", "source_ids": [rid(1)]}
        ],
        "decisions": [
            {
                "text": "Retry with a 5 s wait",
                "reason": "the test timed out",
                "source_ids": [rid(4)],
            }
        ],
        "findings": [{"text": "test_login times out", "source_ids": [rid(3)]}],
        "artifacts": [{"text": "tests/test_login.py", "action": "ran", "source_ids": [rid(2)]}],
        "errors": [{"text": "FAILED test_login: Timeout", "fix": "", "source_ids": [rid(3)]}],
        "open_questions": [{"text": "Should we also fix CI?", "source_ids": [rid(5)]}],
        "current_state": [{"text": "the login test still fails", "source_ids": [rid(3)]}],
        "next_step": [{"text": "add the 5 s wait", "source_ids": [rid(4)]}],
    }


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Script]]:
    with model_server() as (url, script):  # one for the module: stopping one takes 0.5 s
        yield url, script


def answering(script: Script, answer: Callable[[dict[str, Any]], Reply]) -> None:
    """The scripted server replies with ``answer(request body)``, counting from zero."""
    with script.lock:
        script.hits, script.requests = 0, []

    def reply(body: dict[str, Any]) -> Reply:
        with script.lock:
            script.hits += 1
            script.requests.append(body)
        return answer(body)

    script.reply = reply  # type: ignore[method-assign]


async def summarize(
    server: tuple[str, Script], content: str, req: SummaryRequest | None = None
) -> ModelSummaryResult:
    url, script = server
    answering(script, lambda body: (200, completion(content)))
    result = await OpenAICompatibleSummarizer(url, "m", backoff_s=0).summarize(req or request())
    assert isinstance(result, ModelSummaryResult)
    return result


def statements(draft: SummaryDraft) -> list[str]:
    return [f.statement for f in draft.all_facts()]


# --- one prompt file, one schema --------------------------------------------------------


@pytest.mark.spec("R11.3")
def test_one_prompt_file_holds_the_prompt_and_a_strict_schema_of_the_sections() -> None:
    assert PROMPT_FILE.name == "prompt.md" and PROMPT_FILE.read_text().strip() == SYSTEM_PROMPT
    props = ANSWER_SCHEMA["properties"]
    assert list(props) == [
        "requests",
        "decisions",
        "findings",
        "artifacts",
        "errors",
        "open_questions",
        "current_state",
        "next_step",
    ]
    assert set(props) <= set(SECTIONS)  # every section the schema asks for is read

    def strict(node: Any) -> None:  # OpenAI strict mode: every object closed, all required
        if isinstance(node, dict):
            if node.get("type") == "object":
                assert node["additionalProperties"] is False
                assert sorted(node["required"]) == sorted(node["properties"])
            for value in node.values():
                strict(value)

    strict(ANSWER_SCHEMA)
    for section in props:
        assert f'"{section}"' in SYSTEM_PROMPT.split("Schema")[0]  # each one explained


@pytest.mark.spec("R11.3")
def test_the_request_asks_for_the_schema_and_offers_no_tools() -> None:
    body = OpenAICompatibleSummarizer("http://x/v1", "m").request_body(request(512))
    assert body["response_format"] == RESPONSE_FORMATS[0]
    assert body["response_format"]["json_schema"]["schema"] == ANSWER_SCHEMA
    assert body["response_format"]["json_schema"]["strict"] is True
    assert "tools" not in body and body["max_tokens"] == 512 and body["temperature"] == 0
    assert body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert (
        f"[{rid(3)}] tool/tool_outcome: (run_tests, error) FAILED" in body["messages"][1]["content"]
    )


# --- the structured answer onto the draft ------------------------------------------------


@pytest.mark.spec("R11.3", "R11.4")
async def test_a_structured_answer_maps_onto_the_draft_with_its_citations(
    server: tuple[str, Script],
) -> None:
    result = await summarize(server, json.dumps(structured()))
    d = result.draft
    validate_draft(d, request().source_ids, 2000 * MAX_CHARS_PER_TOKEN)
    assert [(f.statement, f.source_ids) for f in d.verified_facts] == [
        ("User asked: Fix the flaky login test, keep Python 3.11", (rid(1),)),
        ("test_login times out", (rid(3),)),
        ("ran: tests/test_login.py", (rid(2),)),
        ("State: the login test still fails", (rid(3),)),
        ("Next step: add the 5 s wait", (rid(4),)),
    ]
    assert [(f.statement, f.source_ids) for f in d.decisions] == [
        ("Retry with a 5 s wait — because the test timed out", (rid(4),))
    ]
    assert [f.statement for f in d.failures] == ["FAILED test_login: Timeout"]
    assert [f.source_ids for f in d.unresolved_questions] == [(rid(5),)]
    assert d.work_artifact_refs == ("tests/test_login.py",)
    assert result.dropped == {} and result.adapter == "openai_compatible"
    assert (result.input_tokens, result.output_tokens) == (100, 20)


@pytest.mark.spec("R11.3")
async def test_the_old_flat_draft_keys_are_still_read(server: tuple[str, Script]) -> None:
    old = {
        "verified_facts": [{"statement": "a fact", "source_ids": [rid(1)]}],
        "decisions": [{"statement": "a decision", "source_ids": [rid(4)]}],
        "failures": [{"statement": "a failure", "source_ids": [rid(3)]}],
        "unresolved_questions": [{"statement": "a question", "source_ids": [rid(5)]}],
        "work_artifact_refs": ["src/a.py"],
        "observations": ["a note"],
    }
    d = (await summarize(server, json.dumps(old))).draft
    assert statements(d) == ["a fact", "a decision", "a failure", "a question"]
    assert (d.work_artifact_refs, d.observations) == (("src/a.py",), ("a note",))


# --- off-schema answers -------------------------------------------------------------------

OFF_SCHEMA = {
    "fenced, with prose around": "Here is the summary:\n```json\n{doc}\n```\nHope it helps!",
    "prose, no fence": "Sure. {doc} Let me know.",
    "wrapped in an object": '{{"summary": {doc}}}',
}


@pytest.mark.spec("R11.4", "R15.3")
@pytest.mark.parametrize("shape", sorted(OFF_SCHEMA))
async def test_json_inside_prose_fences_or_a_wrapper_is_read(
    server: tuple[str, Script], shape: str
) -> None:
    content = OFF_SCHEMA[shape].format(doc=json.dumps(structured()))
    d = (await summarize(server, content)).draft
    assert len(d.all_facts()) == 8 and d.decisions[0].source_ids == (rid(4),)


@pytest.mark.spec("R11.4", "R15.3")
async def test_missing_sections_wrong_types_and_inline_citations_are_read(
    server: tuple[str, Script],
) -> None:
    answer = {
        "Errors": {"error": "FAILED test_login: Timeout", "source_ids": rid(3)},  # not a list
        "open questions": [f"Should we also fix CI? [{rid(5)}]"],  # a string, cited inline
        "decisions": [{"decision": 42, "sources": f"{rid(4)}, {rid(2)}"}],  # a number
        "findings": None,
        "mood": ["cheerful"],  # an extra section
        "requests": [7, {"text": "  ", "source_ids": [rid(1)]}],
    }
    result = await summarize(server, json.dumps(answer))
    d = result.draft
    assert [(f.statement, f.source_ids) for f in d.failures] == [
        ("FAILED test_login: Timeout", (rid(3),))
    ]
    assert [(f.statement, f.source_ids) for f in d.unresolved_questions] == [
        ("Should we also fix CI?", (rid(5),))
    ]
    assert [(f.statement, f.source_ids) for f in d.decisions] == [("42", (rid(4), rid(2)))]
    assert not d.verified_facts
    assert result.dropped == {"malformed": 1, "empty": 1}


@pytest.mark.spec("R11.4", "R15.3")
async def test_an_answer_without_json_fails_as_unparseable(server: tuple[str, Script]) -> None:
    url, script = server
    answering(script, lambda body: (200, completion("I could not summarize this, sorry.")))
    with pytest.raises(InvalidSummary) as err:
        await OpenAICompatibleSummarizer(url, "m").summarize(request())
    assert err.value.reason == "unparseable"


# --- citations ----------------------------------------------------------------------------


@pytest.mark.spec("R11.4", "R11.7")
async def test_uncited_entries_and_citations_outside_the_segment_are_dropped_and_counted(
    server: tuple[str, Script],
) -> None:
    answer = structured()
    answer["findings"] = [
        {"text": "uncited", "source_ids": []},
        {"text": "invented", "source_ids": ["rec_invented", "msg_7"]},
        {"text": "half right", "source_ids": [rid(3), "rec_elsewhere"]},
    ]
    answer["next_step"] = [{"text": "no ids at all"}]
    result = await summarize(server, json.dumps(answer))
    d = result.draft
    validate_draft(d, request().source_ids, 2000 * MAX_CHARS_PER_TOKEN)
    assert "half right" in statements(d) and d.cited_ids() <= request().source_ids
    assert not {"uncited", "invented"} & set(statements(d))
    assert not any("no ids at all" in s for s in statements(d))
    assert result.dropped == {"uncited": 2, "outside_segment": 1, "foreign_ids": 1}


@pytest.mark.spec("R11.4", "R15.3")
@pytest.mark.parametrize(
    ("findings", "reason", "dropped"),
    [
        ([{"text": "a", "source_ids": []}, {"text": "b"}], "uncited", {"uncited": 2}),
        ([{"text": "a", "source_ids": ["x"]}], "unknown_source_id", {"outside_segment": 1}),
        ([], "empty", {}),
    ],
)
async def test_nothing_usable_is_the_only_failure(
    server: tuple[str, Script], findings: list[Any], reason: str, dropped: dict[str, int]
) -> None:
    url, script = server
    answer = {"findings": findings, "errors": []}
    answering(script, lambda body: (200, completion(json.dumps(answer))))
    with pytest.raises(InvalidSummary) as err:
        await OpenAICompatibleSummarizer(url, "m").summarize(request())
    assert err.value.reason == reason and err.value.details["dropped"] == dropped
    with pytest.raises(InvalidSummary) as err:
        read_answer('{"mood": ["fine"]}', request(), COUNT)
    assert err.value.reason == "missing_field"


# --- over-long and cut-off answers --------------------------------------------------------


@pytest.mark.spec("R11.2", "R11.4")
async def test_an_over_long_answer_is_trimmed_to_the_output_bound_not_refused(
    server: tuple[str, Script],
) -> None:
    bound = 200
    answer = structured()
    answer["findings"] = [
        {"text": f"finding {i}: " + "detail " * 40, "source_ids": [rid(3)]} for i in range(30)
    ]
    answer["requests"][0]["text"] = "Fix the login test. " + "context " * 4000 + "THE END"
    result = await summarize(server, json.dumps(answer), request(bound))
    d = result.draft
    assert COUNT(d.text()) <= bound
    validate_draft(d, request().source_ids, bound * MAX_CHARS_PER_TOKEN)
    # failures, open questions and decisions are the last to go
    assert d.failures and d.unresolved_questions and d.decisions
    assert result.dropped["trimmed"] > 0 and result.dropped["shortened"] >= 1


@pytest.mark.spec("R11.2", "R11.4")
def test_a_single_huge_entry_is_shortened_from_the_middle() -> None:
    answer = {"requests": [{"text": "START " + "word " * 5000 + " END", "source_ids": [rid(1)]}]}
    d, dropped = read_answer(json.dumps(answer), request(120), COUNT)
    (fact,) = d.verified_facts
    assert fact.statement.startswith("User asked: START") and fact.statement.endswith("END")
    assert " … " in fact.statement and COUNT(d.text()) <= 120
    assert dropped == {"shortened": 1}


@pytest.mark.spec("R11.4", "R15.3")
async def test_an_answer_cut_off_at_the_output_limit_keeps_its_complete_entries(
    server: tuple[str, Script],
) -> None:
    url, script = server
    full = json.dumps(structured(), ensure_ascii=False)
    cut = full[: full.index('"current_state"') + 40]  # inside current_state's first entry
    answering(script, lambda body: (200, completion("```json\n" + cut, "length")))
    result = await OpenAICompatibleSummarizer(url, "m").summarize(request())
    assert isinstance(result, ModelSummaryResult)
    d = result.draft
    assert len(d.all_facts()) == 6  # all before current_state
    assert d.unresolved_questions[0].source_ids == (rid(5),)
    assert result.dropped == {"cut_off": 1}


# --- any language -------------------------------------------------------------------------


@pytest.mark.spec("R11.3")
@pytest.mark.parametrize(
    "words",
    [
        ("修复不稳定的登录测试", "登录测试超时", "我们也要修复 CI 吗？"),  # noqa: RUF001
        ("Исправить нестабильный тест входа", "тест входа: тайм-аут", "Чинить ли CI?"),
        ("Corriger le test de connexion", "le test expire", "Faut-il aussi réparer la CI ?"),
    ],
)
async def test_an_answer_in_another_language_than_the_transcript_is_kept_as_it_is(
    server: tuple[str, Script], words: tuple[str, str, str]
) -> None:
    request_text, error, question = words
    answer = {
        "requests": [{"text": request_text, "source_ids": [rid(1)]}],
        "errors": [{"text": error, "fix": "", "source_ids": [rid(3)]}],
        "open_questions": [{"text": question, "source_ids": [rid(5)]}],
    }
    result = await summarize(server, json.dumps(answer, ensure_ascii=False))
    d = result.draft
    assert statements(d) == [f"User asked: {request_text}", error, question]
    assert result.dropped == {}
    validate_draft(d, request().source_ids, 2000 * MAX_CHARS_PER_TOKEN)


# --- the response format, with a graceful fallback ----------------------------------------


def refusing(*refused: str | None) -> Callable[[dict[str, Any]], Reply]:
    """A server that refuses the named response_format types (as OpenAI-compatible servers
    do, naming the parameter) and answers with a fenced JSON otherwise."""

    def answer(body: dict[str, Any]) -> Reply:
        fmt = body.get("response_format", {}).get("type")
        if fmt in refused:
            return 400, {"error": {"message": f"response_format {fmt} is not supported"}}
        return 200, completion("```json\n" + json.dumps(structured()) + "\n```")

    return answer


@pytest.mark.spec("R11.3", "R15.3")
async def test_a_server_refusing_json_schema_gets_json_object_and_keeps_it(
    server: tuple[str, Script],
) -> None:
    url, script = server
    answering(script, refusing("json_schema"))
    gateway = OpenAICompatibleSummarizer(url, "m", backoff_s=0)
    first = await gateway.summarize(request())
    assert len(first.draft.all_facts()) == 8
    assert [r.get("response_format", {}).get("type") for r in script.requests] == [
        "json_schema",
        "json_object",
    ]
    await gateway.summarize(request())  # the next call starts where the server agreed
    assert script.requests[-1]["response_format"] == {"type": "json_object"}
    assert script.hits == 3


@pytest.mark.spec("R11.3", "R15.3")
async def test_a_server_refusing_both_formats_gets_plain_text_with_the_schema_in_the_prompt(
    server: tuple[str, Script],
) -> None:
    url, script = server
    answering(script, refusing("json_schema", "json_object"))
    result = await OpenAICompatibleSummarizer(url, "m", backoff_s=0).summarize(request())
    assert len(result.draft.all_facts()) == 8
    last = script.requests[-1]
    assert "response_format" not in last and script.hits == 3
    assert '"open_questions"' in last["messages"][0]["content"]  # the schema, in the prompt


@pytest.mark.spec("R15.3")
async def test_a_400_about_something_else_is_not_retried_in_another_format(
    server: tuple[str, Script],
) -> None:
    url, script = server
    answering(script, lambda body: (400, {"error": {"message": "context length exceeded"}}))
    with pytest.raises(SummarizerFailed) as err:
        await OpenAICompatibleSummarizer(url, "m", max_retries=3).summarize(request())
    assert err.value.details["status"] == 400 and script.hits == 1
