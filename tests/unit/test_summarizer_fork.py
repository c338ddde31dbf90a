"""A summarizer call that reads the agent's cache (issue 39 item 3): with the agent's own
model, the summarizer's request is the agent's last rendered request, byte for byte,
plus one instruction message that indexes the segment's records; tools stay (the start
of the cached prefix) but none can be called (R11.3). Another model or format, or a
request that does not show the whole segment, gets the summarizer's own request."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

from domain.compaction.drafts import SourceItem, SummaryRequest
from domain.compaction.validate import validate_draft
from domain.context.providers import prompt_cache_key, render
from domain.summarizer.fork import AgentRequest, agent_request, same_model
from domain.window.budget import ModelProfile
from services.compaction.openai_compat import OpenAICompatibleSummarizer
from services.compaction.wording import SYSTEM_PROMPT
from services.summarizers.answer import ModelSummaryResult
from tests.support.model_server import Script, model_server

PROFILE = ModelProfile("gpt-test", 128_000, 4_000, 1_000)
CHAT = OpenAICompatibleSummarizer.fork_format  # the format this client forks
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


def rid(n: int) -> str:
    return f"rec_{n:032x}"


def messages() -> list[dict[str, Any]]:
    """An agent's assembled context: instructions, a question, a tool step, an answer."""
    return [
        {"role": "system", "block": "instructions", "content": "You are a careful agent."},
        {"role": "user", "content": "Why does the login test fail?", "record_ids": [rid(1)]},
        {
            "role": "assistant",
            "content": "Looking at the test.",
            "tool_calls": [{"id": "c1", "name": "read_file", "arguments": '{"path": "t.py"}'}],
            "record_ids": [rid(2)],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "FAILED test_login: Timeout after 2 s",
            "record_ids": [rid(3)],
        },
        {"role": "assistant", "content": "It times out: wait 5 s.", "record_ids": [rid(4)]},
        {"role": "user", "content": "Now fix CI too.", "record_ids": [rid(5)]},
    ]


def stored(profile: ModelProfile = PROFILE, purpose: str = "action") -> dict[str, Any]:
    """A prepared context as Prepare stores it (the fields the fork reads)."""
    return {
        "ids": ["prep_1", "ses_1", "run_1", "run_1.main"],
        "purpose": purpose,
        "messages": messages(),
        "tools": TOOLS,
        "profile": dataclasses.asdict(profile),
        "dependency_versions": {"summary_id": "sum_1", "thread_last_sequence": 6},
    }


def segment() -> tuple[SourceItem, ...]:
    return (
        SourceItem(rid(1), 1, "user_input", "user", "Why does the login test fail?"),
        SourceItem(rid(2), 2, "assistant_message", "assistant", "Looking at the test."),
        SourceItem(
            rid(3), 3, "tool_outcome", "tool", "FAILED test_login: Timeout after 2 s", "read_file"
        ),
    )


def forked_request(agent: AgentRequest) -> SummaryRequest:
    return SummaryRequest(segment(), None, 800, "op-1", fork=agent.body)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Script]]:
    with model_server() as (url, script):
        yield url, script


@pytest.mark.spec("R11.3")
def test_the_forked_request_is_the_agents_last_request_byte_for_byte_then_the_instruction() -> None:
    agent = agent_request(stored(), "space_1", PROFILE, CHAT)
    assert agent is not None
    # the request Prepare rendered for this context, with the thread's cache key
    key = prompt_cache_key("space_1", "ses_1", "run_1", "run_1.main")
    assert agent.body == render(messages(), TOOLS, "openai_chat", key, PROFILE.cache_rules)
    body = OpenAICompatibleSummarizer("http://unused", "gpt-test").request_body(
        forked_request(agent)
    )
    sent = json.dumps(body["messages"][:-1], ensure_ascii=False)
    assert sent == json.dumps(agent.body["messages"], ensure_ascii=False)
    assert json.dumps(body["tools"]) == json.dumps(agent.body["tools"])  # the same tools
    assert body["prompt_cache_key"] == key
    # R11.3: no tool can be called; no response_format (it would change the prefix)
    assert body["tool_choice"] == "none" and "response_format" not in body
    last = body["messages"][-1]
    assert last["role"] == "user" and last["content"].startswith(SYSTEM_PROMPT)
    index = last["content"].split("Segment to summarize:\n", 1)[1].splitlines()
    assert index == [
        f"[{rid(1)}] user/user_input: Why does the login test fail?",
        f"[{rid(2)}] assistant/assistant_message: Looking at the test.",
        f"[{rid(3)}] tool/tool_outcome: FAILED test_login: Timeout after 2 s",
    ]
    assert agent.shows(segment(), "sum_1", frozenset())
    # rendered on another summary's view, before the segment's end, or the segment
    # under the summary: the conversation does not hold the segment
    assert not agent.shows(segment(), None, frozenset())
    late = SourceItem(rid(9), 9, "user_input", "user", "later")
    assert not agent.shows((*segment(), late), "sum_1", frozenset())
    assert not agent.shows(segment(), "sum_1", frozenset({rid(2)}))


@pytest.mark.spec("R11.3")
def test_another_model_or_format_or_purpose_is_not_forked() -> None:
    other = dataclasses.replace(PROFILE, name="gpt-small")
    assert agent_request(stored(), "space_1", other, CHAT) is None
    anthropic = dataclasses.replace(PROFILE, provider_format="anthropic_messages")
    assert agent_request(stored(anthropic), "space_1", anthropic, CHAT) is None
    assert not same_model(anthropic, anthropic, CHAT)  # this client speaks OpenAI Chat only
    assert same_model(anthropic, anthropic, "anthropic_messages")
    assert agent_request(stored(purpose="completion"), "space_1", PROFILE, CHAT) is None
    # without a fork, the summarizer's own request: its prompt, no tools
    body = OpenAICompatibleSummarizer("http://unused", "gpt-test").request_body(
        SummaryRequest(segment(), None, 800, "op-1")
    )
    assert body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert "tools" not in body and "tool_choice" not in body


@pytest.mark.spec("R11.3", "R11.4")
async def test_a_forked_call_is_answered_and_validated_as_any_other(
    server: tuple[str, Script],
) -> None:
    url, script = server
    with script.lock:
        script.hits, script.requests, script.mode = 0, [], "ok"
        script.usage = {
            "prompt_tokens": 900,
            "completion_tokens": 40,
            "prompt_tokens_details": {"cached_tokens": 768},
        }
    agent = agent_request(stored(), "space_1", PROFILE, CHAT)
    assert agent is not None
    req = forked_request(agent)
    result = await OpenAICompatibleSummarizer(url, "gpt-test", backoff_s=0).summarize(req)
    assert isinstance(result, ModelSummaryResult)
    (sent,) = script.requests  # one call: no response format to be refused
    assert sent["messages"][:-1] == agent.body["messages"] and sent["tool_choice"] == "none"
    validate_draft(result.draft, req.source_ids, 800 * 6)  # cites the indexed records
    cited = {i for f in result.draft.all_facts() for i in f.source_ids}
    assert cited and cited <= req.source_ids
    assert result.usage is not None and result.usage.cached_input_tokens == 768
