"""A summarizer call that reads the agent's prompt cache (issue 39 item 3; the way
Claude Code compacts by forking the conversation).

When a compaction's summarizer is the agent's own model (the ``compaction`` purpose's
profile has the agent's name and provider format), its request is the agent's last
rendered request of the thread — same messages, same tools, same ``prompt_cache_key`` or
``cache_control`` marks — plus one final instruction. The covered history is then the
start of a prefix the provider already cached, billed at the cached rate; only the
instruction and the answer are fresh. Each summarizer client forks only the format it
speaks (``fork_format``: OpenAI Chat here, ``forked_body``; Anthropic Messages in
``domain.summarizer.anthropic_fork``); any other format, or another model, gets the
summarizer's own request.

R11.3 (the summarizer runs no tools): the tool definitions are sent unchanged, since
they are the start of the cached prefix; OpenAI's fork adds ``tool_choice: "none"`` so
that no tool can be called. No ``response_format`` is added: OpenAI puts a
structured-output schema in front of the system message, which would change the
prefix; the JSON schema travels in the instruction and the answer is read leniently, as
for a server without structured output (``domain.compaction.model_answer``).

Pure: the stored context is handed in as parsed JSON; rendering is
``domain.context.providers.render``, deterministic, so the request re-rendered here is the
one Prepare rendered for the same context, byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from domain.compaction.drafts import SourceItem
from domain.context.providers import prompt_cache_key, render
from domain.window.budget import ModelProfile


@dataclass(frozen=True)
class AgentRequest:
    """The agent's last rendered request of a thread, and what it was rendered from."""

    body: Mapping[str, Any]  # the provider request: messages, tools, prompt_cache_key
    record_ids: frozenset[str]  # the records its messages show
    summary_id: str | None  # the summary its view showed
    through: int  # the thread's last session sequence it rendered

    def shows(
        self, segment: Sequence[SourceItem], summary_id: str | None, summarized: frozenset[str]
    ) -> bool:
        """The model holds ``segment`` in this conversation: the request was rendered on
        the view the job starts from (``summary_id``, which covers ``summarized``), after
        the segment's last record, none of the segment is under that summary, and its
        messages show the segment's records (some render no message of their own: a run's
        start, a call's dispatch record; the index names them all)."""
        ids = {item.record_id for item in segment}
        return (
            summary_id == self.summary_id
            and max(item.session_sequence for item in segment) <= self.through
            and not ids & summarized
            and bool(ids & self.record_ids)
        )


def same_model(agent: ModelProfile, summarizer: ModelProfile, fork_format: str) -> bool:
    """The summarizer can read the agent's cache: one model, one provider format, and
    that format ``fork_format``, the one the summarizer client speaks."""
    return (
        agent.name == summarizer.name
        and agent.provider_format == summarizer.provider_format == fork_format
    )


def agent_request(
    stored: Mapping[str, Any], space_id: str, summarizer: ModelProfile, fork_format: str
) -> AgentRequest | None:
    """The request Prepare rendered for ``stored`` (a prepared context's JSON: its ids,
    purpose, messages, tools, budget report and profile) in ``fork_format``, with the
    thread's ``prompt_cache_key`` and the cache marks placed over the same token counts
    (the report's ``tool_schemas`` item, as Prepare passes it); None when it is not an
    action context or the summarizer is another model or format."""
    profile = ModelProfile(**stored["profile"])
    if stored.get("purpose") != "action" or not same_model(profile, summarizer, fork_format):
        return None
    _prepared, session_id, run_id, instance_id = stored["ids"]
    messages = stored["messages"]
    body = render(
        messages,
        stored["tools"],
        fork_format,
        prompt_cache_key(space_id, session_id, run_id, instance_id),
        profile.cache_rules,
        (stored.get("report") or {}).get("items", {}).get("tool_schemas"),
    )
    ids = frozenset(str(i) for m in messages for i in m.get("record_ids") or ())
    deps = stored["dependency_versions"]
    return AgentRequest(body, ids, deps.get("summary_id"), int(deps["thread_last_sequence"]))


def forked_body(
    agent: Mapping[str, Any], instruction: str, model: str, max_tokens: int
) -> dict[str, Any]:
    """``agent`` continued by one user message, ``instruction``: its messages, tools and
    cache key unchanged, then the call's own settings (none of which is in the prefix).
    With tools, ``tool_choice: "none"`` (R11.3: the summarizer calls none)."""
    body: dict[str, Any] = {"model": model, **agent}
    body["messages"] = [*agent["messages"], {"role": "user", "content": instruction}]
    if agent.get("tools"):
        body["tool_choice"] = "none"
    body["max_tokens"] = max_tokens
    body["temperature"] = 0
    return body
