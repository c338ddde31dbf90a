"""The Anthropic Messages summarizer (issue 39 item 3, its Anthropic half): its own
request (the prompt as system, the rendered segment, no tools); with the agent's own
model, the agent's last rendered request — tools, system, messages and cache marks,
byte for byte — continued by the instruction, so the covered history is read from the
agent's prompt cache; the answer read leniently; usage in Anthropic's shape, the
1-hour writes kept apart; the SDK's errors as ours. Against a scripted Messages server
on localhost (``devstack.anthropic_server``)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.anthropic_server import MessagesScript, anthropic_server, last_user_text
from domain.compaction.drafts import SummaryRequest
from domain.compaction.errors import SummarizerFailed, SummarizerTimeout
from domain.compaction.validate import validate_draft
from domain.context.providers import prompt_cache_key, render
from domain.summarizer.fork import AgentRequest, agent_request
from domain.summarizer.wording import Wording
from domain.usage import Usage
from domain.window.budget import ModelProfile
from services.compaction.openai_compat import OpenAICompatibleSummarizer
from services.compaction.wording import SYSTEM_PROMPT, fork_instruction, render_segment
from services.summarizers.anthropic_messages import AnthropicMessagesSummarizer
from tests.unit.test_summarizer_fork import TOOLS, messages, segment, stored

FORMAT = AnthropicMessagesSummarizer.fork_format
CLAUDE = ModelProfile("claude-test", 200_000, 8_000, 2_000, provider_format=FORMAT)
WORDING = Wording(SYSTEM_PROMPT, render_segment, fork_instruction)
KEY = "sk-ant-secret-test-key"
MARK = '"cache_control"'


def claude_messages() -> list[dict[str, Any]]:
    """The agent's context, its instructions release-owned (they go to ``system``)."""
    first, *rest = messages()
    return [first | {"block": "instruction"}, *rest]


def claude_stored(**overrides: Any) -> dict[str, Any]:
    """The agent's action context as Prepare stores it, for an Anthropic model."""
    return stored(CLAUDE) | {"messages": claude_messages()} | overrides


def agent(**overrides: Any) -> AgentRequest:
    found = agent_request(claude_stored(**overrides), "space_1", CLAUDE, FORMAT)
    assert found is not None
    return found


def summarizer(url: str = "http://127.0.0.1:9", **kw: Any) -> AnthropicMessagesSummarizer:
    return AnthropicMessagesSummarizer("claude-test", KEY, WORDING, base_url=url, **kw)


def forked(a: AgentRequest) -> SummaryRequest:
    return SummaryRequest(segment(), None, 800, "op-1", fork=a.body)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, MessagesScript]]:
    with anthropic_server() as (url, script):
        yield url, script


@pytest.fixture
def script(server: tuple[str, MessagesScript]) -> MessagesScript:
    s = server[1]
    with s.lock:
        s.mode, s.delay_s, s.hits = "ok", 0.0, 0
        s.requests.clear()
        s.api_keys.clear()
    return s


@pytest.mark.spec("R11.3")
def test_the_fork_is_the_agents_request_byte_for_byte_marks_included_then_the_instruction() -> None:
    a = agent()
    key = prompt_cache_key("space_1", "ses_1", "run_1", "run_1.main")
    # Prepare's rendering of the same context: same blocks, same marks
    assert a.body == render(claude_messages(), TOOLS, FORMAT, key, CLAUDE.cache_rules)
    assert [b["text"] for b in a.body["system"]] == ["You are a careful agent."]
    sent = json.dumps(a.body["messages"])
    assert sent.count(MARK) >= 1  # the conversation's end is marked
    req = forked(a)
    body = summarizer().request_body(req)
    # tools and system unchanged, and no tool_choice: a change of it would invalidate the
    # cached messages (Anthropic's documented rule), so the fork sends none, as the agent
    assert json.dumps(body["tools"]) == json.dumps(a.body["tools"])
    assert json.dumps(body["system"]) == json.dumps(a.body["system"])
    assert "tool_choice" not in body
    # every message block of the agent's request, then the instruction, unmarked
    fork_json = json.dumps(body["messages"])
    assert fork_json.startswith(sent[: -len("]}]")])  # up to the end of its last block
    assert sent.rindex(MARK) < len(sent) - len("]}]")  # the last mark lies inside it
    last = body["messages"][-1]
    assert last["role"] == "user" and last["content"][:-1] == a.body["messages"][-1]["content"]
    assert last["content"][-1] == {"type": "text", "text": fork_instruction(req)}
    assert fork_json.count(MARK) == sent.count(MARK)
    assert (body["model"], body["max_tokens"]) == ("claude-test", 800)
    assert "temperature" not in body  # refused by the API version the SDK speaks
    assert a.body == agent().body  # the job's agent request is not changed by a call


@pytest.mark.spec("R11.3")
def test_a_conversation_ending_with_the_assistant_gets_the_instruction_as_a_user_message() -> None:
    ends = [m for m in claude_messages() if m["content"] != "Now fix CI too."]
    a = agent(messages=ends)
    assert a.body["messages"][-1]["role"] == "assistant"
    body = summarizer().request_body(forked(a))
    assert body["messages"][:-1] == a.body["messages"]
    (block,) = body["messages"][-1]["content"]
    assert body["messages"][-1]["role"] == "user" and block["text"].startswith(SYSTEM_PROMPT)


@pytest.mark.spec("R11.3")
def test_the_fork_places_the_marks_on_the_token_counts_prepare_had() -> None:
    """A prefix under the model's minimum gets no mark: the re-rendered request counts
    the tool schemas as Prepare did (the stored report's ``tool_schemas``)."""
    small = [m | {"tokens": 20} for m in claude_messages()]
    a = agent(messages=small, report={"items": {"tool_schemas": 10}})
    key = prompt_cache_key("space_1", "ses_1", "run_1", "run_1.main")
    assert a.body == render(small, TOOLS, FORMAT, key, CLAUDE.cache_rules, 10)
    assert MARK not in json.dumps(a.body)  # 130 tokens: under the 1,024 minimum
    assert a.body != render(small, TOOLS, FORMAT, key, CLAUDE.cache_rules)


@pytest.mark.spec("R11.3")
def test_each_client_forks_only_its_own_format() -> None:
    chat = OpenAICompatibleSummarizer.fork_format
    assert agent_request(claude_stored(), "space_1", CLAUDE, chat) is None
    gpt = dataclasses.replace(CLAUDE, provider_format=chat)
    assert agent_request(stored(gpt), "space_1", gpt, FORMAT) is None
    other = dataclasses.replace(CLAUDE, name="claude-small")
    assert agent_request(claude_stored(), "space_1", other, FORMAT) is None


@pytest.mark.spec("R11.3")
def test_its_own_request_is_the_prompt_and_the_segment_with_no_tools() -> None:
    req = SummaryRequest(segment(), None, 600, "op-2")
    body = summarizer().request_body(req)
    assert body == {
        "model": "claude-test",
        "system": SYSTEM_PROMPT,
        "messages": [{"role": "user", "content": render_segment(req)}],
        "max_tokens": 600,
    }


@pytest.mark.spec("R11.3", "R11.4", "R18")
async def test_a_forked_call_is_answered_billed_with_its_cached_tokens_and_validated(
    server: tuple[str, MessagesScript], script: MessagesScript
) -> None:
    script.usage = {
        "input_tokens": 40,
        "cache_read_input_tokens": 1_200,
        "cache_creation_input_tokens": 100,
        "cache_creation": {"ephemeral_5m_input_tokens": 60, "ephemeral_1h_input_tokens": 40},
        "output_tokens": 30,
    }
    a = agent()
    req = forked(a)
    client = summarizer(server[0])
    result = await client.summarize(req)
    (sent,) = script.requests
    assert sent == json.loads(json.dumps(client.request_body(req)))  # as built, one call
    assert script.api_keys == [KEY] and KEY not in repr(client)
    assert result.usage == Usage(40, 1_200, 100, 30, 0, 40)
    assert result.input_tokens == 1_340 and result.output_tokens == 30
    assert (result.provider, result.model, result.model_call) == ("anthropic", "claude-test", True)
    validate_draft(result.draft, req.source_ids, 800 * 6)
    cited = {i for f in result.draft.all_facts() for i in f.source_ids}
    assert cited and cited <= req.source_ids


@pytest.mark.spec("R11.3", "R18")
async def test_a_fork_answered_with_a_tool_call_is_asked_again_without_tools(
    server: tuple[str, MessagesScript], script: MessagesScript
) -> None:
    script.mode = "tool_use"
    script.usage = {"input_tokens": 10, "cache_read_input_tokens": 500, "output_tokens": 5}
    req = forked(agent())
    result = await summarizer(server[0]).summarize(req)
    first, second = script.requests
    assert first["tools"] and "tools" not in second  # no tool is ever run (R11.3)
    assert second["system"] == SYSTEM_PROMPT
    assert last_user_text(second) == render_segment(req)
    assert result.usage == Usage(20, 1_000, 0, 10)  # both calls billed
    assert result.draft.all_facts()


@pytest.mark.spec("R15.3")
async def test_the_sdks_errors_become_ours_and_the_key_stays_out(
    server: tuple[str, MessagesScript], script: MessagesScript
) -> None:
    req = SummaryRequest(segment(), None, 600, "op-3")
    script.mode = "fail"
    with pytest.raises(SummarizerFailed) as failed:
        await summarizer(server[0], max_retries=1).summarize(req)
    assert failed.value.code == "summarizer_failed" and failed.value.details["status"] == 500
    assert script.hits == 2  # the SDK retried a 5xx once
    assert KEY not in json.dumps(failed.value.details)
    script.mode, script.delay_s = "ok", 1.0
    with pytest.raises(SummarizerTimeout) as slow:
        await summarizer(server[0], timeout_s=0.2, max_retries=0).summarize(req)
    assert slow.value.code == "summarizer_timeout"
    with pytest.raises(SummarizerFailed) as unreachable:
        await summarizer("http://127.0.0.1:9", max_retries=0).summarize(req)
    assert "unreachable" in str(unreachable.value)


@pytest.mark.spec("R11.3", "R17")
def test_the_deployment_wires_the_anthropic_client_and_forks_in_its_format() -> None:
    from schemas.settings import Settings
    from services.compaction.bootstrap import fork_format, make_gateway

    anthropic = Settings(
        summarizer="anthropic", summarizer_model="claude-test", summarizer_api_key=KEY
    )
    gateway = make_gateway(anthropic)
    assert isinstance(gateway, AnthropicMessagesSummarizer)
    assert gateway.base_url == "https://api.anthropic.com" and KEY not in repr(gateway)
    assert fork_format(gateway) == "anthropic_messages"
    openai = Settings(summarizer="openai", summarizer_base_url="http://m/v1", summarizer_model="m")
    assert fork_format(make_gateway(openai)) == "openai_chat"
    assert fork_format(make_gateway(Settings(summarizer="extractive"))) is None
    with pytest.raises(SystemExit, match="ALC_SUMMARIZER_API_KEY"):
        make_gateway(Settings(summarizer="anthropic", summarizer_model="claude-test"))


def test_a_forked_body_names_the_summarizers_model_whatever_the_agents_named() -> None:
    from domain.summarizer.anthropic_fork import forked_messages_body

    agent = {"model": "agent-model", "messages": [{"role": "user", "content": "hi"}]}
    body = forked_messages_body(agent, "summarize", "summarizer-model", 100)
    assert body["model"] == "summarizer-model" and agent["model"] == "agent-model"
