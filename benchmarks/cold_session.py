"""A synthetic agent session for ``benchmarks.prepare_cold``: earlier runs as inherited
history, then the current run. The same shape as ``benchmarks.prepare_scale``'s (user
inputs, assistant messages calling 1-3 tools, outcomes of 50-2,000 characters, about 1 in
100 a large result over the inline limit, final answers), kept apart so the two
benchmarks do not import each other (``prepare_scale`` reports the cold numbers too)."""

from __future__ import annotations

import hashlib
import json
import math
import random
from typing import Any

from domain.context.rendering import RecordView
from domain.context.tokens import TokenCounter

_WORD_TEXT = (
    "the a file function returns value error request response user model tool result "
    "thread record budget session run test passes fails because when then with index "
    "query table column cache view message context summary window limit offset config"
)
_WORDS = tuple(_WORD_TEXT.split(" "))
TOOLS = ("read_file", "search_code", "run_tests", "list_dir", "http_get", "write_file")


def _corpus(rng: random.Random, size: int) -> str:
    """Prose, code-like lines and JSON, to cut record texts from."""
    parts: list[str] = []
    n = 0
    while n < size:
        k = rng.randrange(3)
        if k == 0:
            piece = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 40))) + ". "
        elif k == 1:
            piece = f"def {rng.choice(_WORDS)}_{rng.randint(0, 99)}(x: int) -> str:\n    return x\n"
        else:
            piece = json.dumps({rng.choice(_WORDS): rng.randint(0, 10**6) for _ in range(4)})
        parts.append(piece)
        n += len(piece)
    return "".join(parts)


class Session:
    """Records appended in ``session_sequence`` order, counted once as ingest does."""

    def __init__(self, seed: int, counter: TokenCounter) -> None:
        self.rng = random.Random(seed)
        self.corpus = _corpus(self.rng, 1_000_000)
        self.counter = counter
        self.records: list[RecordView] = []
        self.run = 0
        self.calls = 0

    def _text(self, lo: int, hi: int) -> str:
        n = int(math.exp(self.rng.uniform(math.log(lo), math.log(hi))))
        off = self.rng.randrange(len(self.corpus) - n)
        return self.corpus[off : off + n]

    def _add(self, kind: str, authority: str, text: str, payload: dict[str, Any]) -> None:
        seq = len(self.records) + 1
        counted = "\n".join([text, *(c["name"] for c in payload.get("tool_calls") or ())])
        self.records.append(
            RecordView(
                f"rec{seq:07d}",
                seq,
                f"run{self.run}",
                f"inst{self.run}",
                kind,
                authority,
                text,
                payload,
                self.counter.count(counted),
                -1,
                hashlib.sha256(text.encode()).hexdigest(),
            )
        )

    def step(self, n_calls: int) -> None:
        """An assistant message calling ``n_calls`` tools, then their outcomes."""
        calls = []
        for _ in range(n_calls):
            self.calls += 1
            args = json.dumps({"path": f"src/{self.rng.choice(_WORDS)}.py"})
            name = self.rng.choice(TOOLS)
            calls.append({"call_id": f"call{self.calls:07d}", "name": name, "arguments_json": args})
        self._add("assistant_message", "model", self._text(20, 400), {"tool_calls": calls})
        for c in calls:
            large = self.rng.random() < 0.01
            text = self._text(16_000, 48_000) if large else self._text(50, 2000)
            payload = {"call_id": c["call_id"], "name": c["name"], "status": "ok"}
            self._add("tool_outcome", "tool", text, payload)

    def round(self) -> None:
        self._add("user_input", "user", self._text(20, 600), {"intent": "question"})
        for _ in range(self.rng.randint(1, 3)):
            self.step(self.rng.randint(1, 3))
        self._add("assistant_message", "model", self._text(50, 1500), {"tool_calls": []})


def build(n: int, seed: int, counter: TokenCounter) -> tuple[Session, int]:
    """Earlier runs up to ~n - 40 records, then the current run: a question and tool
    steps up to exactly ``n``. Returns the session and the current run's first record."""
    s = Session(seed, counter)
    while len(s.records) < n - 40:
        if s.rng.random() < 0.1:
            s.run += 1
        s.round()
    s.run += 1
    start = len(s.records)
    s._add("user_input", "user", s._text(20, 600), {"intent": "question"})
    if (n - len(s.records)) % 2:
        s._add("assistant_message", "model", s._text(50, 1500), {"tool_calls": []})
    while len(s.records) < n:
        s.step(1)
    return s, start
