"""A scripted OpenAI Responses API (``POST /v1/responses``, not streamed) on 127.0.0.1, in a
thread of the test process: an agent run in another process (the Agents SDK reads
``OPENAI_BASE_URL``) talks to it over HTTP as it would to the vendor.

The script: a request whose newest input item is a tool's output is answered with text
that quotes the output's first line; any other request calls the first function tool the
request offers, with the table named in the newest user message (``t1`` in "What is in
table t1?"). Every request is kept, so a test can read what the model was sent."""

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

_TABLE = re.compile(r"\b(t\d+)\b")


@dataclass
class ResponsesScript:
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.requests.append(body)
            n = len(self.requests)
        items = body.get("input") or []
        items = [{"role": "user", "content": items}] if isinstance(items, str) else items
        newest = items[-1] if items else {}
        tools = [t for t in body.get("tools") or [] if t.get("type") == "function"]
        if newest.get("type") == "function_call_output" or not tools:
            first = str(newest.get("output", "")).splitlines()[:1] or ["nothing to read"]
            output: dict[str, Any] = _message(n, f"The tool said: {first[0][:80]}")
        else:
            asked = _user_text(items)
            table = (_TABLE.findall(asked) or ["t1"])[-1]
            output = {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": tools[0]["name"],
                "arguments": json.dumps({"name": table}),
                "status": "completed",
            }
        return _response(n, body.get("model", "scripted"), output)


def _user_text(items: list[dict[str, Any]]) -> str:
    for item in reversed(items):
        if item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return " ".join(str(part.get("text", "")) for part in content or [])
    return ""


def _message(n: int, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{n}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _response(n: int, model: str, output: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "completed",
        "output": [output],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 100,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 110,
        },
    }


@contextmanager
def responses_server() -> Iterator[tuple[str, ResponsesScript]]:
    """The base URL (``…/v1``, what ``OPENAI_BASE_URL`` takes) and the script."""
    script = ResponsesScript()

    def reply(path: str, _headers: Message, body: dict[str, Any]) -> tuple[int, Any]:
        if not path.rstrip("/").endswith("/responses"):
            return 404, {"error": {"message": "not scripted"}}
        return 200, script.reply(body)

    with serve_scripted(reply) as url:
        yield f"{url}/v1", script
