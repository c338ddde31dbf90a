"""Seeded synthetic coding-agent sessions with planted facts (issue 16). Pure.

A session is several runs of a coding agent on one repository: a user question (with
constraints, ticket ids, side questions), tool-calling steps (read, grep, tests, git,
logs, benchmarks, edits, HTTP calls) whose outputs are mostly noise — code listings,
grep hits, log lines, test dots, tables — and a final answer. Facts of seven kinds are
planted in the places an agent meets them:

======================  ==========================================================
kind                    planted in
======================  ==========================================================
``path``                tool-call arguments, assistant text, user text, traceback
                        frames, ``git status``, ``git diff`` headers
``error``               error outcomes, test output (``E …`` lines), log lines,
                        assistant text
``decision``            assistant text (sixteen phrasings, two without a cue word),
                        user text and supplements ("do X, not Y", "X instead of Y")
``numeric``             head and tail of benchmark / test / query output, assistant
                        text
``constraint``          user text and supplements
``identifier``          tickets, commit hashes, request ids, env vars, constants,
                        functions — in user text, arguments, output, assistant text
``question``            open questions of the assistant ("which …?", "TODO: find
                        out …", "still unclear whether …"), the user's side questions
======================  ==========================================================

Each fact has a *probe*: a string unique within its session (checked when planted)
whose presence in a compacted view means the fact survived. Templates, word lists and
positions are drawn from a seeded ``random.Random``; the summarizer under test knows
none of them (its weights were set on other seeds than the default one). Output holds
noise that looks like facts: other hashes, paths, numbers, log lines, table rows.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from domain.context.rendering import RecordView


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


COMPONENTS = _words(
    "billing ledger auth search ingest scheduler cache export notify payments "
    "inventory gateway reports accounts webhooks sessions pricing catalog orders "
    "shipping metrics audit uploads tenants invoices refunds quotas feeds alerts "
    "workflows"
)
NOUNS = _words(
    "client sync retry parser models views handlers worker utils service store schema "
    "config loader router queue serializer validator tasks jobs backend adapter "
    "mapper cursor batch window limits rules index planner"
)
VERBS = _words(
    "load sync parse apply build flush resolve merge fetch render reconcile validate "
    "compute dispatch normalize enqueue commit refresh emit collect"
)
ATTRS = _words("timeout batch_size max_retries window limit ttl concurrency threshold interval")
PKGS = _words(
    "urllib3 requests pydantic sqlalchemy httpx orjson redis celery boto3 protobuf "
    "grpcio numpy pandas fastapi alembic psycopg"
)
EXCEPTIONS = _words(
    "KeyError ValueError TypeError AttributeError IndexError AssertionError "
    "RuntimeError UnicodeDecodeError LookupError"
)
ROOTS = _words("src services lib app pkg internal core")
QUEUES = _words("default bulk priority nightly replay backfill")
FILLER_STEP = [
    "Let me check how this is wired.",
    "Looking at the call sites next.",
    "Reading the module to understand the flow.",
    "Now the tests.",
    "That narrows it down.",
    "Let me look at the history of this file.",
    "Checking where this value comes from.",
    "I'll read the surrounding code first.",
    "OK, that matches what I expected so far.",
    "Let me confirm with the logs.",
    "Next, the configuration.",
    "Searching for other uses.",
]
FILLER_ANSWER = [
    "Here is what I found.",
    "Short version below.",
    "The rest of the module looks fine.",
    "Nothing else in the diff touches this path.",
    "The behaviour is consistent across the environments I checked.",
    "I left the surrounding code as it was.",
    "The tests in that package were already flaky before this change.",
    "This only affects the write path; reads were never wrong.",
]


@dataclass(frozen=True)
class Planted:
    kind: str  # path | error | decision | numeric | constraint | identifier | question
    where: str  # user | assistant | arguments | output_head | output_tail | error
    probe: str
    record_index: int  # the record it was planted in


@dataclass
class Session:
    session_id: str
    records: list[RecordView] = field(default_factory=list)
    facts: list[Planted] = field(default_factory=list)


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


class _World:
    """Names of one session's repository; every planted probe is unique in it."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()
        self.comps = rng.sample(COMPONENTS, 6)

    def fresh(self, make: Callable[[], str]) -> str:
        for _ in range(200):
            value = make()
            if value.lower() not in self.used:
                self.used.add(value.lower())
                return value
        raise RuntimeError("vocabulary exhausted")

    def comp(self) -> str:
        return self.rng.choice(self.comps)

    def noun(self) -> str:
        return self.rng.choice(NOUNS)

    def path(self, kind: str = "any") -> str:
        r = self.rng

        def make() -> str:
            c, n, n2 = self.comp(), self.noun(), r.choice(NOUNS)
            choice = kind if kind != "any" else r.choice(["src"] * 5 + ["test", "other"])
            if choice == "test":
                return f"tests/{r.choice(['unit', 'integration'])}/test_{c}_{n}.py"
            if choice == "src":
                return r.choice(
                    [f"{r.choice(ROOTS)}/{c}/{n}.py", f"{r.choice(ROOTS)}/{c}/{n}_{n2}.py"]
                )
            return r.choice(
                [
                    f"config/{c}/{n}.yaml",
                    f"migrations/{r.randint(1, 180):04d}_{r.choice(VERBS)}_{c}_{n}.sql",
                    f"web/src/{c}/{n.title()}{n2.title()}.tsx",
                    f"cmd/{c}-{n}/main.go",
                    f"deploy/helm/{c}/values.yaml",
                ]
            )

        return self.fresh(make)

    def func(self) -> str:
        r = self.rng
        return self.fresh(
            lambda: r.choice(
                [
                    f"{r.choice(VERBS)}_{self.noun()}",
                    f"{r.choice(VERBS)}_{self.comp()}_{self.noun()}",
                    f"_{r.choice(VERBS)}_{self.noun()}_v{r.randint(2, 4)}",
                ]
            )
        )

    def cls(self) -> str:
        return self.fresh(lambda: f"{self.comp().title()}{self.noun().title()}")

    def env(self) -> str:
        r = self.rng
        return self.fresh(lambda: f"{self.comp()}_{self.noun()}_{r.choice(ATTRS)}".upper())

    def code(self) -> str:
        r = self.rng
        return self.fresh(
            lambda: r.choice(
                [
                    f"{self.comp().upper()}_E{r.randint(1000, 9999)}",
                    f"E{r.randint(1000, 9999)}",
                    f"ERR_{self.noun().upper()}_{r.randint(10, 99)}",
                ]
            )
        )

    def sha(self) -> str:
        return self.fresh(lambda: _hex(self.rng, self.rng.choice([7, 8, 10])))

    def ticket(self) -> str:
        r = self.rng
        return self.fresh(
            lambda: f"{r.choice(['PAY', 'OPS', 'CORE', 'DATA', 'WEB'])}-{r.randint(100, 9999)}"
        )

    def req_id(self) -> str:
        return self.fresh(lambda: f"req_{_hex(self.rng, 10)}")

    def key(self) -> str:
        return self.fresh(lambda: f"{self.noun()}_{self.rng.choice(ATTRS)}")

    def ms(self) -> str:
        return self.fresh(lambda: f"{self.rng.uniform(3, 950):.1f} ms")

    def count(self, unit: str) -> str:
        return self.fresh(lambda: f"{self.rng.randint(1_000, 99_000):,} {unit}")

    def seconds(self) -> str:
        return self.fresh(lambda: f"{self.rng.uniform(0.5, 90):.2f}s")

    def unique(self, value: str) -> bool:
        """Claim ``value`` as a probe if no other fact of the session uses it."""
        if value.lower() in self.used:
            return False
        self.used.add(value.lower())
        return True

    def version(self) -> str:
        r = self.rng
        return self.fresh(lambda: f"{r.randint(0, 4)}.{r.randint(0, 40)}.{r.randint(0, 20)}")


class _Builder:
    def __init__(self, rng: random.Random, session_id: str, count: Callable[[str], int]) -> None:
        self.rng = rng
        self.w = _World(rng)
        self.s = Session(session_id)
        self.count = count
        self.run_id = ""
        self.calls = 0
        self.pending: list[Planted] = []

    # --- planting -----------------------------------------------------------------

    def plant(self, kind: str, where: str, probe: str) -> str:
        self.pending.append(Planted(kind, where, probe, -1))
        return probe

    def _commit(self, text: str, extra: str = "") -> None:
        index = len(self.s.records) - 1
        for p in self.pending:
            where = p.where
            if where == "output":
                at = text.find(p.probe)
                where = "output_head" if 0 <= at < 160 else "output_tail"
            # probes are matched case-insensitively ("Pin x, not y." holds "pin x")
            assert p.probe.lower() in f"{text}\n{extra}".lower(), p.probe
            self.s.facts.append(Planted(p.kind, where, p.probe, index))
        self.pending.clear()

    # --- records ------------------------------------------------------------------

    def _record(
        self, kind: str, authority: str, text: str, payload: dict[str, Any], extra: str = ""
    ) -> str:
        seq = len(self.s.records) + 1
        digest = hashlib.sha256(f"{self.s.session_id}\x1f{seq}".encode()).hexdigest()
        rid = f"rec_{digest[:32]}"
        tokens = self.count("\n".join(x for x in (text, extra) if x))
        self.s.records.append(
            RecordView(rid, seq, self.run_id, "main", kind, authority, text, payload, tokens)
        )
        self._commit(text, extra)
        return rid

    def start_run(self, n: int) -> None:
        self.run_id = f"run_{self.s.session_id}_{n}"
        self._record("run_started", "host", "", {})

    def finish_run(self) -> None:
        self._record("run_finished", "host", "", {})

    def user(self, text: str, supplement: bool = False) -> None:
        kind = "supplement" if supplement else "user_input"
        self._record(kind, "user", text, {"intent": "supplement" if supplement else "question"})

    def assistant(self, text: str, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
        specs = []
        for name, args in calls:
            self.calls += 1
            specs.append(
                {"call_id": f"call_{self.calls}", "name": name, "arguments_json": json.dumps(args)}
            )
        payload = {
            "model_operation_id": f"op_{len(self.s.records)}",
            "purpose": "action",
            "tool_calls": specs,
            "finish_reason": "tool_calls" if specs else "stop",
        }
        extra = "\n".join(f"{c['name']}\n{c['arguments_json']}" for c in specs)
        self._record("assistant_message", "model", text, payload, extra)
        return [c["call_id"] for c in specs]

    def outcome(self, call_id: str, name: str, text: str, status: str = "ok") -> None:
        payload = {"call_id": call_id, "name": name, "status": status, "tool_kind": "function"}
        self._record("tool_outcome", "tool", text, payload, name)


# --- noise ------------------------------------------------------------------------


def _code_lines(b: _Builder, n: int) -> list[str]:
    r, w = b.rng, b.w
    out = [f"from {r.choice(ROOTS)}.{w.comp()} import {w.noun()}", "import logging", ""]
    while len(out) < n:
        fn = f"{r.choice(VERBS)}_{w.noun()}"
        args = ", ".join(r.sample(NOUNS, r.randint(1, 3)))
        out.append(f"def {fn}({args}):")
        for _ in range(r.randint(2, 6)):
            lhs, rhs = r.choice(NOUNS), f"{r.choice(VERBS)}_{r.choice(NOUNS)}"
            out.append(f"    {lhs} = {rhs}({r.choice(NOUNS)})")
        out += [f"    return {r.choice(NOUNS)}", ""]
    return out[:n]


def _grep_lines(b: _Builder, pattern: str, n: int) -> list[str]:
    r, w = b.rng, b.w
    lines = []
    for _ in range(n):
        path = f"{r.choice(ROOTS)}/{w.comp()}/{r.choice(NOUNS)}.py"
        lines.append(
            f"{path}:{r.randint(3, 400)}:    {r.choice(NOUNS)} = {pattern}({r.choice(NOUNS)})"
        )
    return lines


def _log_lines(b: _Builder, n: int) -> list[str]:
    r, w = b.rng, b.w
    lines = []
    for _ in range(n):
        day, hour, minute, sec = (
            r.randint(1, 28),
            r.randint(0, 23),
            r.randint(0, 59),
            r.randint(0, 59),
        )
        ts = f"2024-05-{day:02d}T{hour:02d}:{minute:02d}:{sec:02d}Z"
        lines.append(
            f"{ts} INFO {w.comp()}.{r.choice(NOUNS)}: {r.choice(VERBS)} {r.choice(NOUNS)}"
            f" ok in {r.randint(1, 90)}ms batch={r.randint(1, 500)}"
        )
    return lines


def _at(lines: list[str], line: str, where: str, rng: random.Random) -> list[str]:
    """``line`` inserted at the head (first two lines), the tail (last three) or inside."""
    if where == "head":
        k = rng.randint(0, min(1, len(lines)))
    elif where == "tail":
        k = max(0, len(lines) - rng.randint(0, 2))
    else:
        k = rng.randint(len(lines) // 4, max(len(lines) // 4, 3 * len(lines) // 4))
    return [*lines[:k], line, *lines[k:]]


# --- tool episodes: (calls the assistant makes, then their outcomes) -----------------


def _read_file(b: _Builder) -> None:
    r, w = b.rng, b.w
    path = b.plant("path", "arguments", w.path("src")) if r.random() < 0.7 else w.path("src")
    args: dict[str, Any] = {"path": path}
    if r.random() < 0.3:
        args |= {"start_line": r.randint(1, 80), "end_line": r.randint(120, 300)}
    (cid,) = b.assistant(_step_text(b), [(r.choice(["read_file", "view", "open_file"]), args)])
    lines = _code_lines(b, r.randint(60, 260))
    if r.random() < 0.5:
        env = w.env()
        value = r.choice([str(r.randint(2, 900)), f"{r.randint(1, 60)}s", '"strict"'])
        line = f"{env} = {value}"
        b.plant("identifier", "output", env)
        lines = _at(lines, line, r.choice(["head", "tail", "body"]), r)
    b.outcome(cid, "read_file", "\n".join(lines))


def _read_missing(b: _Builder) -> None:
    w = b.w
    path = w.path("other")
    (cid,) = b.assistant(_step_text(b), [("read_file", {"path": path})])
    b.plant("error", "error", f"No such file or directory: '{path}'")
    b.outcome(
        cid,
        "read_file",
        f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'",
        "error",
    )


def _grep(b: _Builder) -> None:
    r, w = b.rng, b.w
    pattern = b.plant("identifier", "arguments", w.env()) if r.random() < 0.5 else w.func()
    where = f"{r.choice(ROOTS)}/"
    (cid,) = b.assistant(
        _step_text(b),
        [(r.choice(["grep", "search", "ripgrep"]), {"pattern": pattern, "path": where})],
    )
    lines = _grep_lines(b, pattern, r.randint(8, 50))
    b.outcome(cid, "grep", "\n".join(lines))


def _tests(b: _Builder) -> None:
    r, w = b.rng, b.w
    target = b.plant("path", "arguments", w.path("test")) if r.random() < 0.5 else w.path("test")
    tool, args = r.choice(
        [
            ("run_tests", {"target": target}),
            ("bash", {"command": f"pytest {target} -q -x"}),
            ("bash", {"command": f"python -m pytest {target} -k {r.choice(VERBS)}"}),
        ]
    )
    (cid,) = b.assistant(_step_text(b), [(tool, args)])
    n_pass = r.randint(20, 400)
    py, major, minor = r.randint(1, 9), r.randint(0, 3), r.randint(0, 3)
    head = [
        "============================= test session starts ==============================",
        f"platform linux -- Python 3.11.{py}, pytest-8.{major}.{minor}",
        f"collected {n_pass + 3} items",
        "",
    ]
    dots = [
        f"{target} "
        + "".join(r.choice("....") for _ in range(r.randint(20, 70)))
        + f" [{r.randint(5, 99)}%]"
        for _ in range(r.randint(3, 12))
    ]
    failing = r.random() < 0.7
    body: list[str] = []
    status = "ok"
    if failing:
        exc, key = r.choice(EXCEPTIONS), w.key()
        src = w.path("src")
        fn = w.func()
        err = b.plant("error", "output", f"{exc}: '{key}'")
        frame = b.plant("path", "output", src) if r.random() < 0.6 else src
        test_name = f"test_{r.choice(VERBS)}_{w.noun()}"
        body = [
            "=================================== FAILURES ===================================",
            f"_____________________________ {test_name} ______________________________",
            "",
            *[f"    {line}" for line in _code_lines(b, r.randint(6, 24))],
            f"{frame}:{r.randint(10, 400)}: in {fn}",
            f"    return {w.noun()}[{key!r}]",
            f"E       {err}",
            "",
            "=========================== short test summary info ============================",
            f"FAILED {target}::{test_name} - {exc}",
        ]
        status = "error" if r.random() < 0.3 else "ok"
    took, passed = w.seconds(), f"{n_pass} passed"
    if r.random() < 0.5 and w.unique(passed):
        b.plant("numeric", "output", passed)
    else:
        b.plant("numeric", "output", took)
    summary = f"{'1 failed, ' if failing else ''}{passed}, {r.randint(0, 4)} skipped in {took}"
    text = "\n".join([*head, *dots, *body, f"{'=' * 20} {summary} {'=' * 20}"])
    b.outcome(cid, tool, text, status)


def _git(b: _Builder) -> None:
    r, w = b.rng, b.w
    kind = r.choice(["log", "status", "show"])
    if kind == "show":
        sha = b.plant("identifier", "arguments", w.sha())
        (cid,) = b.assistant(_step_text(b), [("bash", {"command": f"git show --stat {sha}"})])
        files = [
            f" {w.path()} | {r.randint(1, 80)} {'+' * r.randint(1, 20)}"
            for _ in range(r.randint(2, 6))
        ]
        b.outcome(
            cid,
            "bash",
            "\n".join([f"commit {sha}{_hex(r, 30)}", "Author: dev <dev@example.com>", "", *files]),
        )
        return
    if kind == "status":
        (cid,) = b.assistant(_step_text(b), [("bash", {"command": "git status --short"})])
        lines = [f" M {w.path()}" for _ in range(r.randint(2, 5))]
        lines += [f"?? {r.choice(ROOTS)}/{w.comp()}/{r.choice(NOUNS)}_tmp.py"]
        p = w.path()
        b.plant("path", "output", p)
        lines = _at(lines, f" M {p}", r.choice(["head", "tail"]), r)
        b.outcome(cid, "bash", "\n".join(lines))
        return
    (cid,) = b.assistant(
        _step_text(b), [("bash", {"command": f"git log --oneline -n {r.randint(10, 25)}"})]
    )
    lines = [
        f"{_hex(r, 7)} {r.choice(VERBS)} {w.comp()} {r.choice(NOUNS)}"
        for _ in range(r.randint(10, 30))
    ]
    sha = b.plant("identifier", "output", w.sha())
    lines = _at(
        lines,
        f"{sha} {r.choice(VERBS)} {w.comp()} {r.choice(ATTRS)} handling",
        r.choice(["head", "tail", "body"]),
        r,
    )
    b.outcome(cid, "bash", "\n".join(lines))


def _logs(b: _Builder) -> None:
    r, w = b.rng, b.w
    comp = w.comp()
    (cid,) = b.assistant(
        _step_text(b),
        [("bash", {"command": f"kubectl logs deploy/{comp}-worker --tail {r.choice([200, 500])}"})],
    )
    lines = _log_lines(b, r.randint(30, 120))
    code, rid = b.plant("error", "output", w.code()), w.req_id()
    if r.random() < 0.6:
        b.plant("identifier", "output", rid)
    msg = r.choice(
        [
            "currency mismatch",
            "stale cursor",
            "duplicate delivery",
            "lock wait exceeded",
            "schema drift",
        ]
    )
    day, minute = r.randint(1, 28), r.randint(0, 59)
    line = (
        f"2024-05-{day:02d}T10:{minute:02d}:07Z ERROR {comp}.{w.noun()}: {code} {msg}"
        f" (request_id={rid})"
    )
    lines = _at(lines, line, r.choice(["head", "tail", "body", "body"]), r)
    b.outcome(cid, "bash", "\n".join(lines))


def _bench_row(r: random.Random) -> str:
    verb, noun, p50, p95 = r.choice(VERBS), r.choice(NOUNS), r.uniform(1, 90), r.uniform(20, 300)
    return f"{verb:<10} {noun:<10} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms"


def _url(host: str, path: str, limit: int) -> str:
    return f"https://{host}.staging.internal/v2/{path}?limit={limit}"


def _bench(b: _Builder) -> None:
    r, w = b.rng, b.w
    case = f"{w.comp()}-{r.choice(NOUNS)}"
    (cid,) = b.assistant(
        _step_text(b), [("bash", {"command": f"python bench/run.py --case {case} --runs 5"})]
    )
    rows = [_bench_row(r) for _ in range(r.randint(5, 12))]
    head_value, tail_value = w.ms(), w.count("req/s")
    head = f"bench {case}: 5 runs, warm cache, median {head_value}"
    tail = f"total throughput {tail_value} over {r.randint(30, 120)} s, p99 {w.ms()}"
    if r.random() < 0.5:
        b.plant("numeric", "output", head_value)
    b.plant("numeric", "output", tail_value)
    b.outcome(cid, "bash", "\n".join([head, "-" * 48, *rows, "-" * 48, tail]))


def _query(b: _Builder) -> None:
    r, w = b.rng, b.w
    table = f"{w.comp()}_{r.choice(NOUNS)}"
    (cid,) = b.assistant(
        _step_text(b), [("sql", {"query": f"SELECT status, count(*) FROM {table} GROUP BY 1"})]
    )
    rows = [
        f" {r.choice(VERBS)}ed{' ' * 8}| {r.randint(1, 9000):>8}" for _ in range(r.randint(3, 9))
    ]
    total = b.plant("numeric", "output", w.count("rows"))
    b.outcome(
        cid,
        "sql",
        "\n".join([" status         |  count", "----------------+---------", *rows, f"({total})"]),
    )


def _edit(b: _Builder) -> None:
    r, w = b.rng, b.w
    path = b.plant("path", "arguments", w.path())
    old = f"{r.choice(NOUNS)} = {r.choice(VERBS)}_{r.choice(NOUNS)}({r.choice(NOUNS)})"
    lhs, fn, obj, arg, kw = (r.choice(NOUNS), r.choice(VERBS), r.choice(NOUNS), r.choice(NOUNS),
                             r.choice(NOUNS))  # fmt: skip
    new = f"{lhs} = {fn}_{obj}({arg}, {kw}={r.randint(1, 99)})"
    (cid,) = b.assistant(
        _step_text(b),
        [
            (
                r.choice(["edit_file", "apply_patch", "str_replace"]),
                {"path": path, "old": old, "new": new},
            )
        ],
    )
    b.outcome(
        cid, "edit_file", f"Applied 1 edit to {path} (+{r.randint(1, 9)} -{r.randint(0, 5)} lines)"
    )


def _http(b: _Builder) -> None:
    r, w = b.rng, b.w
    comp = w.comp()
    (cid,) = b.assistant(
        _step_text(b),
        [
            (
                "http_get",
                {"url": _url(comp, r.choice(NOUNS), r.randint(10, 500))},
            )
        ],
    )
    code = b.plant("error", "error", w.code())
    status = r.choice([409, 422, 429, 500, 503])
    body = json.dumps(
        {
            "error": {
                "code": code,
                "message": f"{r.choice(NOUNS)} {r.choice(['rejected', 'locked', 'expired'])}",
                "retry_after": r.randint(1, 90),
            }
        }
    )
    b.outcome(cid, "http_get", f"HTTP {status}\n{body}", "error")


def _install(b: _Builder) -> None:
    r, w = b.rng, b.w
    pkg = r.choice(PKGS)
    (cid,) = b.assistant(_step_text(b), [("bash", {"command": f"pip install {pkg}"})])
    spec = b.plant("error", "error", f"{pkg}=={w.version()}")
    noise = [f"Collecting {p}" for p in r.sample(PKGS, r.randint(2, 6))]
    text = "\n".join(
        [
            *noise,
            f"ERROR: Could not find a version that satisfies the requirement {spec}"
            " (from -r requirements.txt)",
            "ERROR: No matching distribution found",
        ]
    )
    b.outcome(cid, "bash", text, "error")


def _list_dir(b: _Builder) -> None:
    r, w = b.rng, b.w
    root = f"{r.choice(ROOTS)}/{w.comp()}"
    (cid,) = b.assistant(_step_text(b), [("bash", {"command": f"find {root} -name '*.py'"})])
    lines = [f"{root}/{r.choice(NOUNS)}_{r.choice(NOUNS)}.py" for _ in range(r.randint(15, 70))]
    b.outcome(cid, "bash", "\n".join(sorted(set(lines))))


def _diff(b: _Builder) -> None:
    r, w = b.rng, b.w
    (cid,) = b.assistant(_step_text(b), [("bash", {"command": "git diff"})])
    p = b.plant("path", "output", w.path("src"))
    hunks = [f"diff --git a/{p} b/{p}", f"--- a/{p}", f"+++ b/{p}"]
    for _ in range(r.randint(2, 5)):
        hunks.append(
            f"@@ -{r.randint(1, 300)},{r.randint(3, 9)} +{r.randint(1, 300)},{r.randint(3, 9)} @@"
        )
        hunks += [f"{r.choice(' +-')}{line}" for line in _code_lines(b, r.randint(5, 15))]
    b.outcome(cid, "bash", "\n".join(hunks))


EPISODES: list[tuple[Callable[[_Builder], None], int]] = [
    (_read_file, 5), (_grep, 3), (_tests, 4), (_git, 3), (_logs, 3), (_bench, 2),
    (_query, 2), (_edit, 3), (_read_missing, 1), (_http, 1), (_install, 1),
    (_list_dir, 2), (_diff, 2),
]  # fmt: skip


# --- prose ------------------------------------------------------------------------


def _action(b: _Builder) -> str:
    r, w = b.rng, b.w
    makers: list[Callable[[], str]] = [
        lambda: f"pin {r.choice(PKGS)} to {w.version()}",
        lambda: f"move the {r.choice(ATTRS)} check into {w.func()}()",
        lambda: f"raise {w.env()} to {r.randint(2, 900)}",
        lambda: f"drop the legacy {w.key()} flag",
        lambda: f"cache the {w.noun()} lookups in {w.func()}() for {r.randint(2, 60)} minutes",
        lambda: f"add an index on {w.comp()}_{w.noun()}s({w.key()})",
        lambda: f"batch the {w.comp()} writes in groups of {r.randint(20, 900)} in {w.func()}()",
        lambda: f"split {w.func()}() into two passes",
        lambda: f"retry {w.func()}() with exponential backoff capped at {r.randint(5, 120)} s",
        lambda: f"keep the old code path behind {w.env()}",
        lambda: f"replace the regex in {w.func()}() with a real parser",
        lambda: f"use {r.choice(PKGS)} for the {w.comp()} client in {w.func()}()",
        lambda: f"switch {w.func()}() to the {r.choice(QUEUES)} queue",
    ]
    return r.choice(makers)()


DECISIONS = [  # an assistant's choice; {a} is the probe
    "I'll {a}.",
    "Let's {a}.",
    "Decision: {a}.",
    "We decided to {a}.",
    "We decided to {a} instead of {alt} because {why}.",
    "I'm going to {a}; it is the smallest change that fixes it.",
    "We should {a}.",
    "We will {a} from now on.",
    "The fix is to {a}.",
    "Going with the option to {a}.",
    "To keep the change small we will {a}.",
    "Rather than {alt}, we'll {a}.",
    "Plan: {a}, then rerun the suite.",
    "Best option: {a}.",
    "After weighing both, {a} wins.",  # no cue word: the hard case
    "OK, so: {a}.",  # no cue word either
]
USER_DECISIONS = [  # a user's instruction to choose; {a} is the probe
    "{A}, not {alt}.",
    "Please {a}, not {alt}.",
    "Let's {a}.",
    "{A} instead of {alt}.",
    "Go with the option to {a}; {why}.",
]
ALTERNATIVES = [
    "patching every caller",
    "a full rewrite",
    "reverting the last release",
    "another retry layer",
    "a new feature flag",
    "waiting for the upstream fix",
    "a bigger instance",
]
REASONS = [
    "it keeps the diff small",
    "the {q} job depends on it",
    "it is what prod already runs",
    "the tests already cover that path",
    "the {q} queue cannot be paused",
]
OPEN = [  # an assistant's unanswered question; {x} is the probe
    "Open question: does {x} also run on the {q} queue?",
    "Not sure yet whether {x} is still used by the {q} job.",
    "It is still unclear why {x} only fails on the {q} queue.",
    "It is still unclear whether {x} runs before the {q} backfill.",
    "TODO: confirm that {x} is not called from the {q} worker.",
    "TODO: find out whether {x} is retried by the {q} worker.",
    "Which {q} jobs still call {x}?",
    "Does {x} need the same fix for the {q} queue?",
    "I haven't checked if {x} is affected on the {q} queue.",
    "We still need to find out who owns {x} on the {q} side.",
]
USER_OPEN = [  # a user's side question that the run does not answer; {x} is the probe
    "Also, do we still need the {x} flag?",
    "And is {x} still read anywhere?",
    "Which services still set {x}?",
    "TODO: find out if {x} is still set in prod.",
    "It's still unclear whether {x} matters at all.",
]


def _decision(b: _Builder, templates: list[str] | None = None, where: str = "assistant") -> str:
    r = b.rng
    action = b.plant("decision", where, _action(b))
    why = r.choice(REASONS).format(q=r.choice(QUEUES))
    template = r.choice(templates or DECISIONS)
    alt = r.choice(ALTERNATIVES)
    return template.format(a=action, A=action[0].upper() + action[1:], alt=alt, why=why)


def _user_decision(b: _Builder) -> str:
    return _decision(b, USER_DECISIONS, "user")


def _open_question(b: _Builder) -> str:
    x = f"{b.w.func()}()"
    b.plant("question", "assistant", x)
    return b.rng.choice(OPEN).format(x=x, q=b.rng.choice(QUEUES))


def _finding(b: _Builder) -> str:
    r, w = b.rng, b.w
    choice = r.randrange(6)
    if choice == 0:
        p = b.plant("path", "assistant", w.path())
        return r.choice(
            [
                f"The bug is in {p}.",
                f"{p} builds the query without the tenant filter.",
                f"Found it: {p} swallows the exception.",
            ]
        )
    if choice == 1:
        before, after = w.ms(), b.plant("numeric", "assistant", w.ms())
        return r.choice(
            [
                f"That brings p99 from {before} down to {after}.",
                f"Median latency is now {after} (was {before}).",
            ]
        )
    if choice == 2:
        code = b.plant("error", "assistant", w.code())
        return f"It fails with {code} whenever the {w.noun()} list is empty."
    if choice == 3:
        f = b.plant("identifier", "assistant", w.func())
        return r.choice(
            [f"The culprit is {f}() in the {w.comp()} worker.", f"{f}() is called twice per batch."]
        )
    if choice == 4:
        sha = b.plant("identifier", "assistant", w.sha())
        return f"Commit {sha} introduced the regression."
    n = b.plant(
        "numeric",
        "assistant",
        w.count(r.choice(["orphaned rows", "duplicate events", "stale keys"])),
    )
    return f"I found {n} in staging."


def _step_text(b: _Builder) -> str:
    r = b.rng
    parts = [r.choice(FILLER_STEP)] if r.random() < 0.8 else []
    roll = r.random()
    if roll < 0.12:
        parts.append(_decision(b))
    elif roll < 0.2:
        parts.append(_finding(b))
    elif roll < 0.26:
        parts.append(_open_question(b))
    if r.random() < 0.3:
        parts.append(r.choice(FILLER_STEP))
    return " ".join(parts)


def _constraint(b: _Builder) -> str:
    r, w = b.rng, b.w
    choice = r.randrange(6)
    if choice == 0:
        x = b.plant("constraint", "user", f"{w.cls()}.{r.choice(VERBS)}")
        return f"Don't change the public signature of {x}()."
    if choice == 1:
        x = b.plant("constraint", "user", f"p95 under {r.randint(50, 900)} ms")
        return f"The fix must keep {x}."
    if choice == 2:
        x = b.plant("constraint", "user", w.path("other"))
        return f"Never edit {x}, it is generated."
    if choice == 3:
        x = b.plant("constraint", "user", w.env())
        return f"Please keep {x} at its current value."
    if choice == 4:
        x = b.plant("constraint", "user", f"prod-{r.choice(['eu', 'us', 'ap'])}-{r.randint(1, 99)}")
        return f"Do not run anything against {x}."
    x = b.plant("constraint", "user", f"{r.randint(64, 4096)} MB per worker")
    return f"It has to stay within {x}."


def _question_text(b: _Builder) -> str:
    r, w = b.rng, b.w
    parts = []
    choice = r.randrange(4)
    if choice == 0:
        f = b.plant("identifier", "user", w.func())
        parts.append(f"Why does {f}() return duplicates for {w.comp()} exports?")
    elif choice == 1:
        p = b.plant("path", "user", w.path())
        parts.append(f"The {w.comp()} sync is slow again; start with {p}.")
    elif choice == 2:
        parts.append(f"Can you find out why the {w.comp()} job keeps retrying?")
    else:
        parts.append(f"Please fix the flaky {w.comp()} tests.")
    if r.random() < 0.5:
        t = b.plant("identifier", "user", w.ticket())
        parts.append(r.choice([f"This is for {t}.", f"(see {t})", f"Ticket: {t}."]))
    if r.random() < 0.6:
        parts.append(_constraint(b))
    if r.random() < 0.3:
        parts.append(_user_decision(b))
    if r.random() < 0.35:
        flag = b.plant("question", "user", w.key())
        parts.append(r.choice(USER_OPEN).format(x=flag))
    return " ".join(parts)


def _answer(b: _Builder) -> str:
    r = b.rng
    parts = [r.choice(FILLER_ANSWER)] if r.random() < 0.7 else []
    for _ in range(r.randint(1, 2)):
        parts.append(_finding(b))
    for _ in range(r.randint(0, 1)):
        parts.append(_decision(b))
    if r.random() < 0.25:
        parts.append(_open_question(b))
    parts += r.sample(FILLER_ANSWER, r.randint(0, 2))
    return " ".join(parts)


def make_session(
    seed: int, index: int, count: Callable[[str], int], runs: int | None = None
) -> Session:
    """One session: ``runs`` runs (default 4-6), 3-8 tool-calling steps each."""
    rng = random.Random(f"{seed}:{index}")
    b = _Builder(rng, f"s{seed}x{index}", count)
    episodes, weights = zip(*EPISODES, strict=True)
    for run in range(runs or rng.randint(4, 6)):
        b.start_run(run)
        b.user(_question_text(b))
        for step in range(rng.randint(3, 8)):
            rng.choices(episodes, weights)[0](b)
            if step == 1 and rng.random() < 0.2:
                b.user(_constraint(b), supplement=True)
            elif step == 2 and rng.random() < 0.2:
                b.user(_user_decision(b), supplement=True)
        b.assistant(_answer(b), [])
        b.finish_run()
    return b.s
