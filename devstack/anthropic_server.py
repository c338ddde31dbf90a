"""A scripted Anthropic Messages server on 127.0.0.1 (``POST /v1/messages``), run in a
thread of the calling process, as ``devstack.model_server`` is for Chat Completions: a
test or a benchmark points ``ALC_SUMMARIZER=anthropic`` at it and counts real calls.

Its answer is a valid summary draft citing the first and last record ids of the segment
the request's last user text indexes (``[rec_…]`` lines after "Segment to summarize:"),
with the usage the script sets — by default a call that read most of its input from the
prompt cache, as a forked summarizer call does."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import Message
from typing import Any

from devstack.scripted_http import serve_scripted

_ID = re.compile(r"^\[(rec_[0-9a-f]+)\]", re.M)
Reply = tuple[int, dict[str, Any]]


def _usage() -> dict[str, Any]:
    return {
        "input_tokens": 40,
        "cache_read_input_tokens": 1_200,
        "cache_creation_input_tokens": 0,
        "output_tokens": 30,
    }


@dataclass
class MessagesScript:
    """``mode``: ok (a short valid draft) | fail (HTTP 500) | tool_use (a request that
    offers tools is answered with a call of the first one and no text).
    ``delay_s``: each reply waits this long first."""

    mode: str = "ok"
    delay_s: float = 0.0
    usage: dict[str, Any] = field(default_factory=_usage)
    hits: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    # each request's credential: its x-api-key, or its Authorization bearer token
    api_keys: list[str | None] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reply(self, body: dict[str, Any], api_key: str | None) -> Reply:
        with self.lock:
            self.hits += 1
            self.requests.append(body)
            self.api_keys.append(api_key)
            mode, delay, usage = self.mode, self.delay_s, dict(self.usage)
        if delay:
            time.sleep(delay)  # this handler's own thread (ThreadingHTTPServer)
        if mode == "fail":
            return 500, {"type": "error", "error": {"type": "api_error", "message": "scripted"}}
        if mode == "tool_use" and body.get("tools"):
            call = {"type": "tool_use", "id": "toolu_1", "name": body["tools"][0]["name"]}
            return 200, _message(body, [call | {"input": {}}], "tool_use", usage)
        ids = _ID.findall(last_user_text(body).split("Segment to summarize:", 1)[-1])
        draft = {
            "verified_facts": [
                {"statement": "earlier work was done", "source_ids": ids[:1] + ids[-1:]}
            ],
            "decisions": [],
            "failures": [],
            "unresolved_questions": [],
            "work_artifact_refs": [],
            "observations": [],
        }
        return 200, _message(body, [{"type": "text", "text": json.dumps(draft)}], "end_turn", usage)


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the request's last user message (its last text block)."""
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    texts = [b["text"] for b in content if b.get("type") == "text"]
    return texts[-1] if texts else ""


def _message(
    body: dict[str, Any], content: list[dict[str, Any]], stop: str, usage: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "scripted"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }


@contextmanager
def anthropic_server() -> Iterator[tuple[str, MessagesScript]]:
    """The server's base URL (the SDK appends ``/v1/messages``) and its script."""
    script = MessagesScript()

    def reply(path: str, headers: Message, body: dict[str, Any]) -> Reply:
        if path.split("?", 1)[0] != "/v1/messages":
            return 404, {"type": "error", "error": {"type": "not_found_error"}}
        bearer = headers.get("Authorization", "").removeprefix("Bearer ")
        return script.reply(body, headers.get("x-api-key") or bearer or None)

    with serve_scripted(reply) as url:
        yield url, script
