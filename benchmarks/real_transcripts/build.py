"""``python -m benchmarks.real_transcripts.build``: (re)build the committed corpus.

Maintainers only: reads git snapshots of public repositories (``--mirrors``, one
``<owner>+<name>/repo`` git directory each, at the commits in ``SOURCES``) and writes
``benchmarks/corpus/real/transcripts.jsonl.gz``. The benchmark never runs this; it reads
the committed file. Every transcript becomes a list of messages in one neutral shape::

    {"role": "user", "text": ...}
    {"role": "assistant", "text": ..., "calls": [{"name": ..., "arguments": {...}}]}
    {"role": "tool", "name": ..., "text": ..., "status": "ok" | "error"}

(a ``tool`` message answers the assistant's calls in order). Conversion is by the
format's structure only — SWE-agent ``trajectory`` steps (thought → one shell action →
observation), tau-bench OpenAI-style messages (``tool_calls``, tool results; a result
the tool starts with ``Error:`` has the error status), aider chat logs (``####`` lines
are the user's, ``>`` lines aider's own output, SEARCH/REPLACE blocks are edits of the
file named before them, ``/add``, ``/run`` and ``!`` are the user's tool commands).
Secrets are scrubbed (e-mail addresses, API keys and tokens, private paths' user names).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "corpus" / "real" / "transcripts.jsonl.gz"
MAX_CHARS = 90_000  # a transcript's messages are cut at about this many characters

SWE = ("princeton-nlp/SWE-agent", "0772c99c", "MIT")
SWE_TRAJS = {
    "ctf-crypto-babyencryption": "trajectories/demonstrations/ctf/crypto/BabyEncryption.traj",
    "ctf-crypto-babytimecapsule": "trajectories/demonstrations/ctf/crypto/BabyTimeCapsule.traj",
    "ctf-crypto-eps": "trajectories/demonstrations/ctf/crypto/eps.traj",
    "ctf-crypto-katy": "trajectories/demonstrations/ctf/crypto/katy.traj",
    "ctf-forensics-flash": "trajectories/demonstrations/ctf/forensics/flash.traj",
    "ctf-misc-networking": "trajectories/demonstrations/ctf/misc/networking_1.traj",
    "ctf-pwn-warmup": "trajectories/demonstrations/ctf/pwn/warmup.traj",
    "ctf-rev-rock": "trajectories/demonstrations/ctf/rev/rock.traj",
    "ctf-web-i-got-id": "trajectories/demonstrations/ctf/web/i_got_id_demo.traj",
    "swe-marshmallow-1867": "trajectories/demonstrations/replay__marshmallow-code__marshmallow"
    "-1867__function_calling_replace__install-1/marshmallow-code__marshmallow-1867.traj",
    "swe-pydicom-1458": "tests/test_data/trajectories/gpt4__swe-bench-dev-easy_first_only__"
    "default__t-0.00__p-0.95__c-3.00__install-1/pydicom__pydicom-1458.traj",
    "swe-test-repo-i1": "tests/test_data/trajectories/gpt4__swe-agent__test-repo__default_"
    "from_url__t-0.00__p-0.95__c-3.00__install-1/swe-agent__test-repo-i1.traj",
    "swe-humanevalfix-0": "trajectories/demonstrations/human_thought__swe-bench-HumanEvalFix"
    "-python__lcb__t-0.00__p-0.95__c-4.00__install-0/humanevalfix-python-0.traj",
}
TAU = ("sierra-research/tau-bench", "59a200c", "MIT", "historical_trajectories/gpt-4o-airline.json")
TAU_TASKS = (196, 159, 133, 109, 52, 33, 13, 173)
AIDER_EXAMPLES = ("zyh320888/aider", "c98deaf5", "Apache-2.0")
ZH_GROUPS = {
    "aider-zh-examples-1": ("hello-world-flask", "2048-game", "add-test", "update-docs"),
    "aider-zh-examples-2": ("complex-change", "no-color", "semantic-search-replace"),
    "aider-zh-examples-3": ("census", "pong", "css-exercises", "chat-transcript-css"),
}
EN_GROUPS = {
    "aider-en-examples-1": ("hello-world-flask", "2048-game", "add-test", "update-docs"),
    "aider-en-examples-2": ("complex-change", "no-color", "census", "pong"),
}
# (repo, commit that holds the history, licence, language, transcripts to cut). Only
# repositories whose own licence file grants an open licence (README: the table).
AIDER_LOGS = {
    "aider-ru-mozgoslav": ("AlexShchuka/mozgoslav", "b21c5d9^", "MIT", "ru", 3),
}
# (repo, commit, licence, language, transcripts: each the ``# aider chat started at``
# sessions it joins, by their 0-based place in the log) — chosen where the user writes
# French; the repositories are aider forks whose LICENSE.txt is aider's Apache-2.0.
AIDER_SESSIONS: dict[str, tuple[str, str, str, str, tuple[tuple[int, ...], ...]]] = {
    "aider-fr-kinchercheur": (
        "DigitalKin-ai/aider_kinchercheur",
        "840e41e^",
        "Apache-2.0",
        "fr",
        ((11, 12, 13, 14), (49,), (51,)),
    ),
    "aider-fr-nova": ("Lesterpaintstheworld/aider", "61082ffd", "Apache-2.0", "fr", ((72,),)),
}

_SECRETS = (
    (re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+"), "user@example.com"),
    (re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_-]{16,}"), "[REDACTED_KEY]"),
    (re.compile(r"\b(ghp|gho|ghs|github_pat|xox[bpas])_[A-Za-z0-9_]{16,}"), "[REDACTED_TOKEN]"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "[REDACTED_KEY]"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+"), "[REDACTED_JWT]"),
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/-]{16,}"), r"\1 [REDACTED_TOKEN]"),
    (
        re.compile(
            r"(?i)\b([A-Z_]*(?:API_KEY|SECRET|TOKEN|PASSWORD)[A-Z_]*)\s*([=:])\s*['\"]?[^\s'\"]{6,}"
        ),
        r"\1\2[REDACTED]",
    ),
    (re.compile(r"(?i)(csrf-token\\?\"\s+content=\\?\")[^\"\\]+"), r"\1[REDACTED]"),
    (re.compile(r"(?i)(C:\\{1,2}Users\\{1,2}|/Users/|/home/)[^\\/\s]+"), r"\1user"),
)


def scrub(value: Any) -> Any:
    if isinstance(value, str):
        for pattern, repl in _SECRETS:
            value = pattern.sub(repl, value)
        return value
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    return value


def git_show(mirrors: Path, repo: str, commit: str, path: str) -> str:
    git = mirrors / repo.replace("/", "+") / "repo"
    out = subprocess.run(
        ["git", "-C", str(git), "show", f"{commit}:{path}"], capture_output=True, check=True
    )
    return out.stdout.decode("utf-8", "replace")


def clip(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first messages up to ``MAX_CHARS``, never ending between a call and its output."""
    out: list[dict[str, Any]] = []
    used = 0
    for m in messages:
        size = len(m.get("text", "")) + len(json.dumps(m.get("calls", [])))
        if used + size > MAX_CHARS and out and m["role"] != "tool":
            break
        out.append(m)
        used += size
    return out


# --- SWE-agent ---------------------------------------------------------------------------


def swe_agent(raw: str) -> list[dict[str, Any]]:
    data = json.loads(raw)
    users = [h for h in data["history"] if h["role"] == "user"]
    task = users[0]["content"] if isinstance(users[0]["content"], str) else ""
    task = task.split("\n\nINSTRUCTIONS:")[0].replace("ISSUE:\n", "", 1).strip()
    msgs: list[dict[str, Any]] = [{"role": "user", "text": task}]
    for step in data["trajectory"]:
        action = (step.get("action") or "").strip()
        if not action:
            continue
        args: dict[str, Any] = {"command": action}
        try:
            state = json.loads(step.get("state") or "{}")
        except (TypeError, json.JSONDecodeError):
            state = {}
        head = action.split()[0] if action.split() else ""
        if head in ("edit", "insert", "str_replace_editor") and state.get("open_file") not in (
            None,
            "n/a",
        ):
            args["path"] = state["open_file"]
        thought = (step.get("thought") or "").strip()
        msgs.append(
            {"role": "assistant", "text": thought, "calls": [{"name": "bash", "arguments": args}]}
        )
        obs = step.get("observation") or ""
        msgs.append({"role": "tool", "name": "bash", "text": obs, "status": "ok"})
    return msgs


# --- tau-bench ---------------------------------------------------------------------------


def tau(traj: list[dict[str, Any]]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for m in traj:
        role = m["role"]
        text = m.get("content") or ""
        if role == "user":
            msgs.append({"role": "user", "text": text})
        elif role == "assistant":
            calls = []
            for c in m.get("tool_calls") or []:
                fn = c["function"]
                try:
                    args = json.loads(fn["arguments"])
                except (TypeError, json.JSONDecodeError):
                    args = {"raw": fn["arguments"]}
                names[c["id"]] = fn["name"]
                calls.append({"name": fn["name"], "arguments": args})
            msgs.append({"role": "assistant", "text": text, "calls": calls})
        elif role == "tool":
            status = "error" if text.startswith("Error:") else "ok"
            name = m.get("name") or names.get(m.get("tool_call_id", ""), "tool")
            msgs.append({"role": "tool", "name": name, "text": text, "status": status})
    return msgs


# --- aider -------------------------------------------------------------------------------

_FENCE = re.compile(r"^```")
_EDIT_START = re.compile(r"^<<<<<<< (SEARCH|ORIGINAL)\s*$")
_EDIT_END = re.compile(r"^>>>>>>> (REPLACE|UPDATED)\s*$")


def _blocks(lines: list[str], marked: bool) -> Iterator[tuple[str, str]]:
    """("user" | "aider" | "assistant", text) runs of an aider log. ``marked``: aider
    ends the user's lines with a Markdown line break (two spaces), so a ``####`` line
    without one is the assistant's heading."""
    kind, buf = "", []
    for line in lines:
        if (line.startswith("#### ") or line == "####") and (not marked or line.endswith("  ")):
            k, body = "user", line[5:]
        elif line.startswith("> ") or line == ">":
            k, body = "aider", line[2:]
        else:
            k, body = "assistant", line
        if not line.strip() or line.strip() in ("####", ">"):
            buf.append("")  # a blank line never ends a run
            continue
        if k != kind:
            if buf and "".join(buf).strip():
                yield kind, "\n".join(buf).strip()
            kind, buf = k, []
        buf.append(body.rstrip())
    if buf and "".join(buf).strip():
        yield kind, "\n".join(buf).strip()


def _edits(text: str) -> tuple[str, list[dict[str, Any]]]:
    """The assistant's prose and its SEARCH/REPLACE edits (path: the line before the
    fence, or the fence's first line)."""
    lines = text.split("\n")
    prose: list[str] = []
    calls: list[dict[str, Any]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            j = i + 1
            while j < len(lines) and not _FENCE.match(lines[j]):
                j += 1
            body = lines[i + 1 : j]
            starts = [n for n, b in enumerate(body) if _EDIT_START.match(b)]
            if starts:
                path = ""
                if starts[0] > 0 and body[starts[0] - 1].strip():
                    path = body[starts[0] - 1].strip()
                elif prose and prose[-1].strip() and " " not in prose[-1].strip():
                    path = prose.pop().strip()
                calls.append(
                    {
                        "name": "edit_file",
                        "arguments": {"path": path, "edit": "\n".join(body[starts[0] :])},
                    }
                )
                i = j + 1
                continue
        prose.append(line)
        i += 1
    return "\n".join(prose).strip(), calls


def aider(raw: str) -> list[list[dict[str, Any]]]:
    """One message list per ``# aider chat started at`` session (the examples: per file)."""
    sessions = re.split(r"(?m)^# aider chat started at .*$", raw)
    marked = bool(re.search(r"(?m)^#### .*  $", raw))
    out = []
    for s in sessions:
        s = re.sub(r"</?div[^>]*>", "", s)
        msgs: list[dict[str, Any]] = []
        pending = 0  # calls still waiting for their output
        for kind, text in _blocks(s.split("\n"), marked):
            if kind == "user":
                text = " ".join(text.split("\n")) if "\n" in text and len(text) < 400 else text
                first = text.split()[0] if text.split() else ""
                if first in ("/add", "/read-only", "/read"):
                    paths = text.split()[1:]
                    msgs.append(
                        {
                            "role": "assistant",
                            "text": "",
                            "calls": [{"name": "add_to_chat", "arguments": {"paths": paths}}],
                        }
                    )
                    pending = 1
                elif first == "/run" or (text.startswith("!") and not text.startswith("![")):
                    cmd = text[len(first) :].strip() if first == "/run" else text[1:].strip()
                    msgs.append(
                        {
                            "role": "assistant",
                            "text": "",
                            "calls": [{"name": "run_command", "arguments": {"command": cmd}}],
                        }
                    )
                    pending = 1
                elif first in ("/ask", "/code", "/architect"):
                    msgs.append({"role": "user", "text": text[len(first) :].strip()})
                elif first.startswith("/"):
                    continue
                else:
                    msgs.append({"role": "user", "text": text})
            elif kind == "assistant":
                if text.startswith("---") and not msgs:
                    continue  # front matter of an example page
                prose, calls = _edits(text)
                if not prose and not calls:
                    continue
                msgs.append({"role": "assistant", "text": prose, "calls": calls})
                pending = len(calls)
            else:  # aider's own output
                run = re.findall(r"(?m)^Running (.+)$", text)
                if pending:
                    name = (
                        msgs[-1]["calls"][0]["name"] if msgs and msgs[-1].get("calls") else "aider"
                    )
                    msgs.append({"role": "tool", "name": name, "text": text, "status": "ok"})
                    for _ in range(pending - 1):
                        msgs.append({"role": "tool", "name": name, "text": "", "status": "ok"})
                    pending = 0
                elif run:
                    for cmd in run:
                        msgs.append(
                            {
                                "role": "assistant",
                                "text": "",
                                "calls": [{"name": "run_command", "arguments": {"command": cmd}}],
                            }
                        )
                        msgs.append(
                            {"role": "tool", "name": "run_command", "text": text, "status": "ok"}
                        )
                elif msgs:
                    msgs.append(
                        {
                            "role": "assistant",
                            "text": "",
                            "calls": [{"name": "aider", "arguments": {}}],
                        }
                    )
                    msgs.append({"role": "tool", "name": "aider", "text": text, "status": "ok"})
        if pending and msgs:
            msgs.extend(
                {"role": "tool", "name": "edit_file", "text": "", "status": "ok"}
                for _ in range(pending)
            )
        if any(m["role"] == "user" for m in msgs):
            out.append(msgs)
    return out


def _cut(sessions: list[list[dict[str, Any]]], n: int) -> list[list[dict[str, Any]]]:
    """``n`` transcripts of consecutive sessions, each up to ``MAX_CHARS``."""
    out: list[list[dict[str, Any]]] = []
    cur: list[dict[str, Any]] = []
    for s in sessions:
        cur.extend(s)
        if sum(len(m.get("text", "")) for m in cur) >= MAX_CHARS * 0.7:
            out.append(clip(cur))
            cur = []
            if len(out) == n:
                return out
    if cur and len(out) < n:
        out.append(clip(cur))
    return out


def build(mirrors: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(
        tid: str,
        source: str,
        repo: str,
        commit: str,
        path: str,
        lic: str,
        lang: str,
        msgs: list[dict[str, Any]],
    ) -> None:
        out.append(
            {
                "id": tid,
                "source": source,
                "language": lang,
                "repo": repo,
                "commit": commit,
                "path": path,
                "licence": lic,
                "messages": scrub(clip(msgs)),
            }
        )

    repo, commit, lic = SWE
    for tid, path in SWE_TRAJS.items():
        kind = "ctf-agent" if tid.startswith("ctf") else "swe-agent"
        add(
            tid,
            kind,
            repo,
            commit,
            path,
            lic,
            "en",
            swe_agent(git_show(mirrors, repo, commit, path)),
        )
    repo, commit, lic, path = TAU
    runs = json.loads(git_show(mirrors, repo, commit, path))
    for k in TAU_TASKS:
        add(
            f"tau-airline-{k}",
            "tau-bench",
            repo,
            commit,
            f"{path}#{k}",
            lic,
            "en",
            tau(runs[k]["traj"]),
        )
    repo, commit, lic = AIDER_EXAMPLES
    for groups, base, lang in (
        (ZH_GROUPS, "aider/website_cn/examples", "zh"),
        (EN_GROUPS, "aider/website/examples", "en"),
    ):
        for tid, names in groups.items():
            msgs: list[dict[str, Any]] = []
            for name in names:
                for s in aider(git_show(mirrors, repo, commit, f"{base}/{name}.md")):
                    msgs.extend(s)
            add(
                tid,
                "aider-examples",
                repo,
                commit,
                f"{base}/{{{','.join(names)}}}.md",
                lic,
                lang,
                msgs,
            )
    for tid, (repo, commit, lic, lang, n) in AIDER_LOGS.items():
        path = ".aider.chat.history.md"
        sessions = aider(git_show(mirrors, repo, commit, path))
        for k, msgs in enumerate(_cut(sessions, n), 1):
            add(f"{tid}-{k}", "aider-log", repo, commit, path, lic, lang, msgs)
    for tid, (repo, commit, lic, lang, picks) in AIDER_SESSIONS.items():
        path = ".aider.chat.history.md"
        parts = re.split(
            r"(?m)^(?=# aider chat started at )", git_show(mirrors, repo, commit, path)
        )
        for k, group in enumerate(picks, 1):
            msgs = [m for s in aider("".join(parts[i] for i in group)) for m in s]
            add(
                f"{tid}-{k}",
                "aider-log",
                repo,
                commit,
                f"{path}#sessions={','.join(map(str, group))}",
                lic,
                lang,
                msgs,
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"))
    args = parser.parse_args(argv)
    corpus = build(args.mirrors)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(OUT, "wt", encoding="utf-8") as f:
        for t in corpus:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")
    for t in corpus:
        chars = sum(len(m.get("text", "")) for m in t["messages"])
        print(f"{t['id']:<32} {t['language']} {len(t['messages']):>4} messages {chars:>7} chars")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(corpus)} transcripts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
