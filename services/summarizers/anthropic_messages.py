"""Summarizer over Anthropic's Messages API, with the official ``anthropic`` SDK (R11.3).

Its own request: the prompt as ``system``, one user message with the segment's records
rendered, no tools, ``max_tokens`` the request's output bound. No ``temperature``: the
API version the SDK sends (2026-10-21; the SDK has no sampling parameters any more)
refuses it with a 400, on every Claude model. A forked
request (``req.fork``: the compaction purpose's profile is the agent's model in this
format, and the agent's last request of the thread shows the whole segment) is that
request continued by the instruction (``domain.summarizer.anthropic_fork``): tools,
system and cache marks as the agent's, so the covered history is read from the agent's
prompt cache.

The SDK bounds each attempt (``timeout``) and retries connection errors, 408, 409, 429
and 5xx (``max_retries``, with its own backoff); what it finally raises becomes ours:
``SummarizerTimeout`` for a timeout, ``SummarizerFailed`` otherwise, with the HTTP status
when there is one. The API key lives in the SDK client only — never in logs, error
details or ``repr`` (an error body that echoes it is redacted) — and the client is given
everything it would otherwise read from the environment (key, base URL, its telemetry:
off, as the compaction service reports each call as its own GenAI span).

Of the answer, only the text blocks are read, leniently (``read_answer``); a
``tool_use`` block is never run (R11.3). A forked call answered with no text at all (the
model reached for one of the agent's tools) is asked once more with the summarizer's
own request, which offers none; both calls' usage is billed. Usage is the response's
(``input_tokens``, ``cache_read_input_tokens``, ``cache_creation_input_tokens`` with its
5-minute / 1-hour split, ``output_tokens``), read through ``domain.usage``'s Anthropic
shape, so a job's ``model_call`` bills the cached tokens at the cached rate.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import anthropic
from anthropic.types import Message, TextBlock
from pydantic import JsonValue

from domain.compaction.drafts import SummaryRequest, SummaryResult
from domain.compaction.errors import InvalidSummary, SummarizerFailed, SummarizerTimeout
from domain.summarizer.anthropic_fork import FORMAT, forked_messages_body
from domain.summarizer.wording import Wording
from domain.usage import Usage, parse_usage
from schemas.errors import InvalidRequest
from services.summarizers.answer import Caller, model_result
from storage.tokenizers import make_counter

log = logging.getLogger(__name__)

ANTHROPIC_API = "https://api.anthropic.com"  # the SDK appends /v1/messages
PROVIDER = "anthropic"  # gen_ai.provider.name
ERROR_SNIPPET_CHARS = 300


class AnthropicMessagesSummarizer:
    name = "anthropic_messages"
    # The provider format it speaks: a job forks the agent's request only in this one.
    fork_format = FORMAT

    def __init__(
        self,
        model: str,
        api_key: str,
        wording: Wording,
        *,
        base_url: str = ANTHROPIC_API,
        timeout_s: float = 30.0,
        max_retries: int = 2,
        count: Callable[[str], int] | None = None,
    ) -> None:
        if timeout_s <= 0 or max_retries < 0:
            raise ValueError("timeout_s must be positive and max_retries >= 0")
        self.model = model
        self.base_url = base_url
        self.wording = wording
        self.timeout_s = timeout_s
        # The output bound is measured with this: the job's tokenizer (bootstrap passes
        # it); cl100k (bundled, no download) by default, never a count of characters.
        self.count = count or make_counter("cl100k_base").count
        self._api_key = api_key
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout_s,
            max_retries=max_retries,
            open_telemetry=False,
        )

    def __repr__(self) -> str:
        return f"AnthropicMessagesSummarizer(base_url={self.base_url!r}, model={self.model!r})"

    def request_body(self, req: SummaryRequest) -> dict[str, JsonValue]:
        """The Messages body: the agent's request continued when ``req`` forks it, the
        summarizer's own otherwise."""
        if req.fork is not None:
            return forked_messages_body(
                req.fork, self.wording.instruction(req), self.model, req.max_output_tokens
            )
        return self.own_body(req)

    def own_body(self, req: SummaryRequest) -> dict[str, JsonValue]:
        # No "tools" key at all (R11.3): nothing the model could call.
        return {
            "model": self.model,
            "system": self.wording.system,
            "messages": [{"role": "user", "content": self.wording.segment(req)}],
            "max_tokens": req.max_output_tokens,
        }

    async def summarize(self, req: SummaryRequest) -> SummaryResult:
        started = time.perf_counter()
        message = await self._create(self.request_body(req), req)
        usage = message_usage(message)
        text = answer_text(message)
        if not text.strip() and req.fork is not None:
            log.warning(
                "summary %s: the forked call answered no text (stop_reason %s): asking again"
                " with the summarizer's own request",
                req.model_operation_id,
                message.stop_reason,
            )
            message = await self._create(self.own_body(req), req)
            usage = _plus(usage, message_usage(message))
            text = answer_text(message)
        if not text.strip():
            raise InvalidSummary(
                "the model answered no text",
                reason="unparseable",
                where="content",
                stop_reason=message.stop_reason,
            )
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        caller = Caller(self.name, self.model, PROVIDER)
        return model_result(req, text, self.count, usage, elapsed_ms, caller)

    async def _create(self, body: Mapping[str, Any], req: SummaryRequest) -> Message:
        """One call, the SDK's retries included; its errors as ours (R15.3)."""
        common = {"model_operation_id": req.model_operation_id}
        try:
            message = await self._client.messages.create(**body)
        except anthropic.APITimeoutError as exc:
            raise SummarizerTimeout(
                f"summarizer gave no answer within {self.timeout_s}s", **common
            ) from exc
        except anthropic.APIStatusError as exc:
            raise SummarizerFailed(
                f"summarizer answered HTTP {exc.status_code}",
                status=exc.status_code,
                body=self._redact(exc.response.text)[:ERROR_SNIPPET_CHARS],  # whole key first
                **common,
            ) from exc
        except anthropic.APIError as exc:  # unreachable, or an answer that is not JSON
            raise SummarizerFailed(
                f"summarizer unreachable: {type(exc).__name__}", **common
            ) from exc
        if not isinstance(message, Message):  # a stream: never asked for
            raise InvalidSummary("summarizer answered no message", reason="unparseable")
        return message

    def _redact(self, text: str) -> str:
        # Some providers echo the credential they rejected.
        return text.replace(self._api_key, "***") if self._api_key else text


def answer_text(message: Message) -> str:
    """The answer's text blocks, joined; its ``tool_use`` (or thinking) blocks left out."""
    return "".join(b.text for b in message.content or () if isinstance(b, TextBlock))


def message_usage(message: Message) -> Usage | None:
    """The response's usage as ``domain.usage`` reads Anthropic's shape (the SDK's
    other fields, such as ``service_tier``, are not counts); None when the server reports
    none or what it reports cannot be attributed (usage is accounting, R18: the call is
    then counted by the caller, never taken as 0 tokens)."""
    u = getattr(message, "usage", None)
    if u is None:
        return None
    raw: dict[str, Any] = {
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_input_tokens": u.cache_read_input_tokens,
        "cache_creation_input_tokens": u.cache_creation_input_tokens,
    }
    if u.cache_creation is not None:
        raw["cache_creation"] = {
            "ephemeral_5m_input_tokens": u.cache_creation.ephemeral_5m_input_tokens,
            "ephemeral_1h_input_tokens": u.cache_creation.ephemeral_1h_input_tokens,
        }
    try:
        return parse_usage({k: v for k, v in raw.items() if v is not None})
    except InvalidRequest as exc:
        log.warning("summarizer usage not understood (%s): the call is counted", exc.message)
        return None


def _plus(a: Usage | None, b: Usage | None) -> Usage | None:
    return a + b if a is not None and b is not None else a or b
