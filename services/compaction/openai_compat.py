"""Summarizer over any OpenAI-compatible Chat Completions endpoint (R11.3).

The request offers no tools, asks for a JSON object at temperature 0 and is bounded in
output tokens, attempts and time per attempt. Transport errors, timeouts, 429 and 5xx
are retried a bounded number of times; other 4xx are not (the same request would fail
again). The API key goes only into the Authorization header — never into logs, error
details or ``repr``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import httpx

from domain.compaction.drafts import SummaryDraft, SummaryRequest, SummaryResult
from domain.compaction.errors import InvalidSummary, SummarizerFailed, SummarizerTimeout
from domain.pricing import Usage, parse_usage
from schemas.errors import InvalidRequest

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 2.0
ERROR_SNIPPET_CHARS = 300

SYSTEM_PROMPT = """You summarize an old part of an agent conversation so it can replace that part.
Answer with ONE JSON object with exactly these keys:
  "verified_facts", "decisions", "failures", "unresolved_questions": arrays of
      {"statement": string, "source_ids": [record ids]},
  "work_artifact_refs": array of strings (at most 10 file paths, the files the tool calls
      read, ran or edited first),
  "observations": array of short strings.
Rules:
- Every statement cites the records it rests on; use ONLY the record ids shown in
  square brackets in the segment. Never invent ids.
- Record history only: what was asked, found, decided, what failed, what is still open.
- Do not state tasks, plans or instructions; never start a statement with "PLAN:",
  "TASK:" or "SYSTEM:".
- Spend the output where the facts are. Keep, word for word where short: what the user
  asked and every constraint they set; every decision, however phrased ("I'll ...",
  "Let's ...", "Decision: ...", "we will ...", "switching to ..."); error codes and
  messages; numbers with their units; identifiers (commit hashes, ticket ids, request
  ids, env vars, function names); the files tool calls touched (calls are shown with
  their arguments); questions nobody answered.
- From tool output take the lines that carry such facts, wherever they are (often the
  end: totals, the error), not the first lines; drop filler, progress and repetition.
- One entry per record where you can: a statement may hold several facts of the same
  record. Keep tool failures and unanswered questions.
- The previous summary, if given, is context only: do not repeat it.
- Records of kind "summary:<section>" are entries of earlier summaries being rolled up:
  merge and condense them into fewer, shorter entries of the same sections, keeping
  failures, open questions, decisions, numbers and identifiers, and cite the record ids
  shown with them."""


def render_segment(req: SummaryRequest) -> str:
    """The user message: one ``[record_id] role/kind: text`` line per record; a record
    that made tool calls shows them with their arguments (``→ calls: name {json}``)."""
    lines: list[str] = []
    if req.previous_summary_text:
        lines += ["Previous summary (context only):", req.previous_summary_text, ""]
    if req.plan.items:  # State of record, shown beside the summary (R11.4, R11.5)
        lines += [
            f"Current plan (v{req.plan.version}), shown to the agent on its own: never state"
            " an item's status otherwise; report an earlier plan only as the past"
            ' ("earlier: ...", "was").',
            *(f"- [{i.status}] {i.text} (id {i.item_id})" for i in req.plan.items),
            "",
        ]
    lines.append("Segment to summarize:")
    for item in req.segment:
        tool = ""
        if item.tool_name or item.tool_status:
            tool = f"({', '.join(x for x in (item.tool_name, item.tool_status) if x)}) "
        text = item.text.replace("\n", "\\n")  # one record per line, ids stay unambiguous
        calls = "; ".join(
            f"{name} {args}".replace("\n", "\\n")
            for name, args in item.arguments
            if args != item.text  # a tool_call record whose text is its arguments
        )
        if calls:  # not in square brackets: those hold record ids only
            text = f"{text} → calls: {calls}" if text else f"→ calls: {calls}"
        lines.append(f"[{item.record_id}] {item.role}/{item.kind}: {tool}{text}")
    return "\n".join(lines)


class OpenAICompatibleSummarizer:
    name = "openai_compatible"

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
    ) -> None:
        if timeout_s <= 0 or max_retries < 0 or backoff_s < 0:
            raise ValueError("timeout_s must be positive; max_retries and backoff_s >= 0")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self._api_key = api_key
        self._client = client  # owned by the caller; None ⇒ one short-lived client per call

    def __repr__(self) -> str:
        return f"OpenAICompatibleSummarizer(url={self.url!r}, model={self.model!r})"

    def request_body(self, req: SummaryRequest) -> dict[str, Any]:
        # No "tools" key at all (R11.3): even an empty list invites tool-call parsing.
        return {
            "model": self.model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": render_segment(req)},
            ],
            "response_format": {"type": "json_object"},
            "max_tokens": req.max_output_tokens,
            "temperature": 0,
        }

    async def summarize(self, req: SummaryRequest) -> SummaryResult:
        started = time.perf_counter()
        body = self.request_body(req)
        if self._client is not None:
            payload = await self._post_with_retries(self._client, body, req)
        else:
            async with httpx.AsyncClient() as client:
                payload = await self._post_with_retries(client, body, req)
        draft = parse_completion(payload)
        usage = completion_usage(payload)
        return SummaryResult(
            draft=draft,
            model_operation_id=req.model_operation_id,
            input_tokens=usage.input_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0,
            elapsed_ms=(time.perf_counter() - started) * 1000.0,
            adapter=self.name,
            usage=usage,
        )

    async def _post_with_retries(
        self, client: httpx.AsyncClient, body: dict[str, Any], req: SummaryRequest
    ) -> dict[str, Any]:
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


def completion_usage(payload: dict[str, Any]) -> Usage | None:
    """The completion's ``usage``, normalized (``domain.pricing.parse_usage``: cached
    prompt tokens and reasoning tokens kept); None when the provider reports none. Usage
    is accounting (R18): a provider that garbles it must not fail the call, so nonsense
    keeps only the plain prompt and completion counts that make sense."""
    raw = payload.get("usage")
    if not isinstance(raw, dict):
        return None
    try:
        return parse_usage(raw)
    except InvalidRequest as exc:
        log.warning("summarizer usage not understood (%s): plain counts kept", exc.message)
        return Usage.openai(_count(raw.get("prompt_tokens")), _count(raw.get("completion_tokens")))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def _json_body(resp: httpx.Response) -> dict[str, Any]:
    try:
        payload = resp.json()
    except ValueError as exc:
        raise InvalidSummary(
            "summarizer response is not JSON", reason="unparseable", where="body"
        ) from exc
    if not isinstance(payload, dict):
        raise InvalidSummary("summarizer response is not an object", reason="unparseable")
    return payload


def parse_completion(payload: dict[str, Any]) -> SummaryDraft:
    """``choices[0].message.content`` as a ``SummaryDraft``; ``InvalidSummary`` otherwise."""
    try:
        choice = payload["choices"][0]
        content = choice["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise InvalidSummary(
            "completion has no message content", reason="unparseable", where="envelope"
        ) from exc
    if not isinstance(content, str):
        raise InvalidSummary("completion content is not text", reason="unparseable")
    try:
        data = json.loads(content)
    except ValueError as exc:
        # finish_reason "length" means the JSON was cut off by max_tokens.
        raise InvalidSummary(
            "completion content is not JSON",
            reason="unparseable",
            finish_reason=choice.get("finish_reason") if isinstance(choice, dict) else None,
        ) from exc
    return SummaryDraft.from_dict(data)
