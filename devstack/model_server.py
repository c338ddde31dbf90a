"""A scripted OpenAI-compatible Chat Completions server on 127.0.0.1, run in a thread of
the calling process, so a benchmark or a test counts real model calls across our real
services."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from devstack.scripted_http import serve_scripted

_ID = re.compile(r"^\[(rec_[0-9a-f]+)\]", re.M)


HOLD_S = 120.0  # the longest a held reply waits


@dataclass
class Script:
    """``mode``: ok (short valid summary) | long (valid but no real reduction) | fail (HTTP
    500) | garbage (not JSON)."""

    mode: str = "ok"
    delay_s: float = 0.0  # a slow model: each reply waits this long first
    # a held model: each reply waits until this is set (at most ``HOLD_S``)
    hold: threading.Event | None = None
    statement: str | None = None  # the fact an "ok" summary states (default: a filler)
    # the usage every reply reports (Chat Completions' shape)
    usage: dict[str, Any] = field(
        default_factory=lambda: {"prompt_tokens": 10, "completion_tokens": 5}
    )
    hits: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
        with self.lock:
            self.hits += 1
            self.requests.append(body)
            mode, delay, usage, hold = self.mode, self.delay_s, self.usage, self.hold
        if delay:
            time.sleep(delay)  # this handler's own thread (ThreadingHTTPServer)
        if hold is not None:
            hold.wait(HOLD_S)
        if mode == "fail":
            return 500, {"error": {"message": "scripted failure"}}
        if mode == "garbage":
            return 200, _completion("this is not json", usage)
        segment = body["messages"][-1]["content"].split("Segment to summarize:", 1)[-1]
        ids = _ID.findall(segment)
        words = 3 if mode == "ok" else 4000
        draft = {
            "verified_facts": [
                {
                    "statement": self.statement or "earlier work " + "detail " * words,
                    "source_ids": ids[:1] + ids[-1:],
                }
            ],
            "decisions": [],
            "failures": [],
            "unresolved_questions": [],
            "work_artifact_refs": [],
            "observations": [],
        }
        return 200, _completion(json.dumps(draft), usage)


def _completion(content: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "cmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "scripted",
        "usage": usage,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": content},
            }
        ],
    }


@contextmanager
def model_server() -> Iterator[tuple[str, Script]]:
    """The server's base URL (``…/v1``, what an OpenAI client takes) and its script."""
    script = Script()
    with serve_scripted(lambda _path, _headers, body: script.reply(body)) as url:
        yield f"{url}/v1", script
