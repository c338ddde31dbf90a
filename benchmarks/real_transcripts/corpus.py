"""The committed corpus of public agent transcripts as our records, and the facts each
one holds — derived from structure only, never from phrases.

A transcript (``benchmarks/corpus/real/transcripts.jsonl.gz``; ``build.py`` made it) is
a list of messages: ``user`` (text), ``assistant`` (text and tool calls), ``tool`` (the
output of the assistant's next unanswered call, with a status). Every user message
starts a run of its own (a question, R1); the records are the ``user_input``,
``assistant_message`` and ``tool_outcome`` records an integration would append.

Facts, by kind:

- **request** — every user message: a distinctive span of it (its first 60 characters,
  cut at a space; 24 characters of text without spaces, as Chinese);
- **file** — every path in a tool call's arguments: a ``path``/``file``/``paths``
  argument, or a path-shaped word (with ``/`` or a file extension) of a shell command;
- **command** — every shell command run (a ``command``/``cmd`` argument): its first
  line, clipped to 60 characters at a space;
- **call argument** — every other tool call's string arguments (ids, names, codes);
- **error** — a tool output with the error status (its first line), and in any tool
  output the lines that carry an error by their form: the exception line that ends a
  ``Traceback``, ``Name(Error|Exception): …`` lines, a non-zero exit code, ``FAILED`` /
  ``ERROR`` lines (pytest), ``error:``/``fatal:`` lines (compilers, git), ``npm ERR!``,
  ``error TS…``, the shell's ``command not found`` / ``No such file or directory``;
  clipped to 80 characters. Source code that merely mentions an exception
  (``except AttributeError:``) is not an error line.

A fact is *kept* by a text when its key (whitespace-normalized, case-folded; or its
JSON-escaped form, as arguments are rendered) appears in it.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from domain.context.rendering import RecordView

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "real" / "transcripts.jsonl.gz"
KINDS = ("request", "file", "command", "call argument", "error")
SHELL_TOOLS = frozenset({"bash", "run_command", "shell", "execute_bash", "terminal"})
PATH_ARGS = ("path", "file", "file_path", "filename", "paths", "files", "target_file")
COMMAND_ARGS = ("command", "cmd")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_PATHY = re.compile(r"^[\w.~@+-]*(/[\w.@+-]+)+/?$|^[\w@+-]+(\.[\w-]+)*\.[A-Za-z][\w]{0,5}$")
_EXC = re.compile(r"^(E\s+)?([A-Za-z_][\w.]*)?(Error|Exception|Interrupt|Exit)\b(:.*)?$")
_ERROR_LINES = (
    re.compile(r"exit(ed)?( with)? (code|status):? ?-?[1-9]\d*", re.I),
    re.compile(r"^(FAILED|ERROR)\b"),
    re.compile(r"^(error|fatal)(\[\w+\])?:", re.I),
    re.compile(r"^\S+:\d+(:\d+)?: (error|fatal error):"),
    re.compile(r"\berror TS\d+:"),
    re.compile(r"^npm ERR!"),
    re.compile(r": command not found$"),
    re.compile(r": No such file or directory$"),
)


@dataclass(frozen=True)
class Fact:
    kind: str
    key: str
    record_id: str  # the first record that holds it


@dataclass
class Transcript:
    id: str
    source: str
    language: str
    licence: str
    repo: str
    messages: list[dict[str, Any]]
    records: list[RecordView] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)


def load(path: Path = CORPUS) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def clip(text: str, limit: int) -> str:
    """``text`` (whitespace-normalized) up to ``limit`` characters, cut at a space when
    there is one past half of it."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    return cut[:space] if space >= limit // 2 else cut


def request_key(text: str) -> str:
    flat = " ".join(text.split())
    if _CJK.search(flat[:60]) and flat[:60].count(" ") < 4:
        return flat[:24]
    return clip(flat, 60)


def records_of(
    messages: Sequence[dict[str, Any]], count: Callable[[str], int], session: str = "ses_real"
) -> list[RecordView]:
    """The transcript as records: every user message opens run ``run_<k>`` on its main
    thread ``ins_<k>``; a tool message answers the oldest unanswered call."""
    out: list[RecordView] = []
    run = 0
    pending: list[dict[str, str]] = []
    calls = 0

    def add(kind: str, authority: str, text: str, payload: dict[str, Any]) -> None:
        seq = len(out) + 1
        out.append(
            RecordView(
                f"rec_{seq:05d}",
                seq,
                f"run_{run}",
                f"ins_{run}",
                kind,
                authority,
                text,
                payload,
                count(text) + count(json.dumps(payload, ensure_ascii=False)) // 2,
            )
        )

    for m in messages:
        role = m["role"]
        if role == "user":
            run += 1
            pending.clear()
            add("user_input", "user", m["text"], {"intent": "question"})
        elif role == "assistant":
            specs = []
            for c in m.get("calls", []):
                calls += 1
                specs.append(
                    {
                        "call_id": f"call_{calls}",
                        "name": c["name"],
                        "arguments_json": json.dumps(c["arguments"], ensure_ascii=False),
                    }
                )
            pending.extend(specs)
            add("assistant_message", "model", m.get("text", ""), {"tool_calls": specs})
        elif role == "tool" and pending:
            call = pending.pop(0)
            payload = {**call, "status": m.get("status", "ok")}
            payload.pop("arguments_json")
            add("tool_outcome", "tool", m.get("text", ""), payload)
    return out


def _paths_in_command(command: str) -> Iterable[str]:
    for word in command.split():
        word = word.strip("'\"`,;()[]{}")
        if word.startswith("-") or "://" in word or len(word) < 4 or word.count("/") > 12:
            continue
        if _PATHY.match(word) and not word.replace(".", "").isdigit():
            yield word


def error_lines(text: str) -> list[str]:
    """The lines of a tool output that carry an error by their form."""
    lines = text.splitlines()
    out: list[str] = []
    in_tb = False
    for line in lines:
        s = line.strip()
        if not s:
            continue
        if s.startswith("Traceback (most recent call last)"):
            in_tb = True
            continue
        if in_tb:
            if not line[:1].isspace():
                out.append(s)
                in_tb = False
            continue
        named = _EXC.match(s) and (":" in s or s.split()[-1].endswith(("Error", "Exception")))
        if named or any(p.search(s) for p in _ERROR_LINES):
            out.append(s)
    return out


def facts_of(records: Sequence[RecordView]) -> list[Fact]:
    seen: set[tuple[str, str]] = set()
    out: list[Fact] = []

    def add(kind: str, key: str, rid: str) -> None:
        key = key.strip()
        if len(key) < 4 or (kind == "request" and len(key) < 8):
            return
        if (kind, norm(key)) not in seen:
            seen.add((kind, norm(key)))
            out.append(Fact(kind, key, rid))

    for r in records:
        if r.kind == "user_input":
            add("request", request_key(r.text), r.record_id)
        elif r.kind == "assistant_message":
            for call in r.payload.get("tool_calls", []):
                args = json.loads(call["arguments_json"] or "{}")
                if not isinstance(args, dict):
                    continue
                shell = call["name"] in SHELL_TOOLS
                for name, value in args.items():
                    values = value if isinstance(value, list) else [value]
                    if name in PATH_ARGS:
                        for v in values:
                            if isinstance(v, str):
                                add("file", v, r.record_id)
                    elif name in COMMAND_ARGS and isinstance(value, str):
                        first = value.strip().splitlines()[0] if value.strip() else ""
                        add("command", clip(first, 60), r.record_id)
                        for p in _paths_in_command(first):
                            add("file", p, r.record_id)
                    elif not shell and call["name"] not in ("edit_file", "aider"):
                        for v in values:
                            if isinstance(v, str) and 5 <= len(v) <= 80:
                                add("call argument", v, r.record_id)
        elif r.kind == "tool_outcome":
            if r.payload.get("status") == "error":
                first = next((ln for ln in r.text.splitlines() if ln.strip()), "")
                add("error", clip(first, 80), r.record_id)
            for line in error_lines(r.text):
                add("error", clip(line, 80), r.record_id)
    return out


def kept(fact: Fact, flat_text: str) -> bool:
    """Whether ``flat_text`` (``norm``-ed) holds the fact's key, as written or JSON-escaped."""
    key = norm(fact.key)
    return key in flat_text or norm(json.dumps(fact.key, ensure_ascii=False)[1:-1]) in flat_text


def transcripts(count: Callable[[str], int], path: Path = CORPUS) -> list[Transcript]:
    out = []
    for t in load(path):
        tr = Transcript(t["id"], t["source"], t["language"], t["licence"], t["repo"], t["messages"])
        tr.records = records_of(tr.messages, count)
        tr.facts = facts_of(tr.records)
        out.append(tr)
    return out
