"""Summarizer over any OpenAI-compatible Chat Completions endpoint (R11.3).

The request offers no tools, asks at temperature 0 for the JSON answer that
``prompt.md`` describes (structured output where the server has it, a JSON object or
plain text where it refuses it) and is bounded in output tokens, attempts and time per
attempt. Transport errors, timeouts, 429 and 5xx are retried a bounded number of times;
other 4xx are not (the same request would fail again). The API key goes only into the
Authorization header — never into logs, error details or ``repr``.

A request whose ``fork`` is set (the agent's own model, its last request of the thread
showing the whole segment) is that request continued by one instruction message
(``services.compaction.wording.fork_instruction``: this prompt, then an index of the
segment's records by id and first words, so the model can cite them) with
``tool_choice: "none"`` and no ``response_format`` (``domain.summarizer.fork``): the
covered history is read from the agent's prompt cache. OpenAI Chat Completions only;
other formats never fork.

A model's answer is read leniently (``read_answer``): prose or a code fence around the
JSON, a cut-off answer, missing sections, wrong types, entries without a valid
citation, entries too long for the output bound and answers in another language than
the transcript all still give a summary of what is usable, with what was dropped
counted; only an answer with nothing usable fails (``InvalidSummary``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

import httpx
from pydantic import JsonValue

from domain.compaction.drafts import (
    SummaryRequest,
    SummaryResult,
)
from domain.compaction.errors import InvalidSummary, SummarizerFailed, SummarizerTimeout
from domain.summarizer.fork import forked_body
from domain.usage import Usage, parse_usage
from schemas.errors import InvalidRequest
from services.compaction.wording import (
    ANSWER_SCHEMA,
    SYSTEM_PROMPT,
    fork_instruction,
    render_segment,
)
from services.summarizers.answer import Caller, model_result
from storage.tokenizers import make_counter

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 2.0
ERROR_SNIPPET_CHARS = 300

# Tried in this order; a server that refuses one (HTTP 400/422) gets the next (R11.3).
RESPONSE_FORMATS: tuple[dict[str, JsonValue] | None, ...] = (
    {
        "type": "json_schema",
        "json_schema": {"name": "compaction_summary", "strict": True, "schema": ANSWER_SCHEMA},
    },
    {"type": "json_object"},
    None,  # plain text: the schema is in the prompt, and the answer parser is lenient
)


# gen_ai.provider.name of a Chat Completions server (any OpenAI-compatible one included).
PROVIDER = "openai"


class OpenAICompatibleSummarizer:
    name = "openai_compatible"
    # The provider format it speaks: a job forks the agent's request only in this one.
    fork_format = "openai_chat"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 2,
        client: httpx.AsyncClient | None = None,
        *,
        backoff_s: float = 0.2,
        count: Callable[[str], int] | None = None,
    ) -> None:
        if timeout_s <= 0 or max_retries < 0 or backoff_s < 0:
            raise ValueError("timeout_s must be positive; max_retries and backoff_s >= 0")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        # The output bound is measured with this: the job's tokenizer (bootstrap passes
        # it); cl100k (bundled, no download) by default, never a count of characters.
        self.count = count or make_counter("cl100k_base").count
        self._format = 0  # index into RESPONSE_FORMATS: the first this server accepts
        self._api_key = api_key
        self._client = client  # owned by the caller; None ⇒ one short-lived client per call

    def __repr__(self) -> str:
        return f"OpenAICompatibleSummarizer(url={self.url!r}, model={self.model!r})"

    def request_body(self, req: SummaryRequest, fmt: int | None = None) -> dict[str, JsonValue]:
        """The Chat Completions body; ``fmt`` indexes ``RESPONSE_FORMATS`` (default: the
        first this server accepted). A forked request continues the agent's (no format)."""
        if req.fork is not None:
            return forked_body(req.fork, fork_instruction(req), self.model, req.max_output_tokens)
        # No "tools" key at all (R11.3): even an empty list invites tool-call parsing.
        body: dict[str, JsonValue] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": render_segment(req)},
            ],
            "max_tokens": req.max_output_tokens,
            "temperature": 0,
        }
        response_format = RESPONSE_FORMATS[self._format if fmt is None else fmt]
        if response_format is not None:
            body["response_format"] = response_format
        return body

    async def summarize(self, req: SummaryRequest) -> SummaryResult:
        started = time.perf_counter()
        if self._client is not None:
            payload = await self._complete(self._client, req)
        else:
            async with httpx.AsyncClient() as client:
                payload = await self._complete(client, req)
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        caller = Caller(self.name, self.model, PROVIDER)
        usage = completion_usage(payload)
        return model_result(req, completion_content(payload), self.count, usage, elapsed_ms, caller)

    async def _complete(
        self, client: httpx.AsyncClient, req: SummaryRequest
    ) -> dict[str, JsonValue]:
        """The completion; a server that refuses the response format (``_refuses_format``)
        is asked again with the next one, remembered, so later calls start there."""
        if req.fork is not None:  # no response_format to refuse
            return await self._post_with_retries(client, self.request_body(req), req)
        while True:
            fmt = self._format
            try:
                return await self._post_with_retries(client, self.request_body(req, fmt), req)
            except SummarizerFailed as exc:
                if fmt + 1 >= len(RESPONSE_FORMATS) or not _refuses_format(exc):
                    raise
                self._format = max(self._format, fmt + 1)
                log.warning(
                    "summarizer refused response_format %s (HTTP %s): trying %s",
                    _format_name(fmt),
                    exc.details.get("status"),
                    _format_name(self._format),
                )

    async def _post_with_retries(
        self, client: httpx.AsyncClient, body: dict[str, JsonValue], req: SummaryRequest
    ) -> dict[str, JsonValue]:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        attempts = self.max_retries + 1
        last: SummarizerFailed | None = None
        for attempt in range(1, attempts + 1):
            if last is not None:
                await asyncio.sleep(min(self.backoff_s * 2 ** (attempt - 2), MAX_BACKOFF_S))
            common = {"attempts": attempt, "model_operation_id": req.model_operation_id}
            try:
                # httpx timeouts are per read/write; asyncio.timeout bounds the whole attempt.
                async with asyncio.timeout(self.timeout_s):
                    resp = await client.post(
                        self.url, json=body, headers=headers, timeout=self.timeout_s
                    )
            except (TimeoutError, httpx.TimeoutException):
                last = SummarizerTimeout(
                    f"summarizer gave no answer within {self.timeout_s}s", **common
                )
            except httpx.TransportError as exc:
                last = SummarizerFailed(f"summarizer unreachable: {type(exc).__name__}", **common)
            else:
                if resp.status_code == 200:
                    return _json_body(resp)
                last = SummarizerFailed(
                    f"summarizer answered HTTP {resp.status_code}",
                    status=resp.status_code,
                    body=self._redact(resp.text[:ERROR_SNIPPET_CHARS]),
                    **common,
                )
                if resp.status_code != 429 and resp.status_code < 500:
                    raise last  # the same request would be refused again
            log.warning(
                "summary attempt %d/%d for %s failed: %s",
                attempt,
                attempts,
                req.model_operation_id,
                last.code,
            )
        assert last is not None
        raise last

    def _redact(self, text: str) -> str:
        # Some providers echo the credential they rejected.
        return text.replace(self._api_key, "***") if self._api_key else text


def completion_usage(payload: Mapping[str, JsonValue]) -> Usage | None:
    """The completion's ``usage``, normalized (``domain.usage.parse_usage``: cached
    prompt tokens and reasoning tokens kept); None when the provider reports none or
    what it reports cannot be attributed to kinds of tokens. Usage is accounting (R18): a
    provider that garbles it must not fail the call, and it is never taken as 0 tokens —
    the caller counts the call instead (``BoundedSummarizer.counted``)."""
    raw = payload.get("usage")
    if not isinstance(raw, dict):
        return None
    try:
        return parse_usage(raw)
    except InvalidRequest as exc:
        log.warning("summarizer usage not understood (%s): the call is counted", exc.message)
        return None


def _json_body(resp: httpx.Response) -> dict[str, JsonValue]:
    try:
        payload = resp.json()
    except ValueError as exc:
        raise InvalidSummary(
            "summarizer response is not JSON", reason="unparseable", where="body"
        ) from exc
    if not isinstance(payload, dict):
        raise InvalidSummary("summarizer response is not an object", reason="unparseable")
    return payload


def _refuses_format(exc: SummarizerFailed) -> bool:
    """A 400/422 that names the response format (OpenAI, Azure, vLLM, llama.cpp and
    LiteLLM all do): another format may pass, where any other refusal would repeat."""
    body = str(exc.details.get("body", "")).lower()
    return exc.details.get("status") in (400, 422) and any(
        word in body for word in ("response_format", "json_schema", "json_object", "schema")
    )


def _format_name(index: int) -> str:
    fmt = RESPONSE_FORMATS[index]
    return str(fmt["type"]) if fmt else "text"


def completion_content(payload: Mapping[str, JsonValue]) -> str:
    """``choices[0].message.content`` (text parts joined); ``InvalidSummary`` otherwise."""
    choices = payload.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict) or "content" not in message:
        raise InvalidSummary(
            "completion has no message content", reason="unparseable", where="envelope"
        )
    content = message["content"]
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        content = "".join(_text_of(p) for p in content)
    if not isinstance(content, str) or not content.strip():
        raise InvalidSummary("completion content is not text", reason="unparseable")
    return content


def _text_of(part: JsonValue) -> str:
    text = part.get("text") if isinstance(part, dict) else None
    return text if isinstance(text, str) else ""
