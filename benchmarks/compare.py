"""Benchmarks of two commits in one table: ``python -m benchmarks.compare BEFORE AFTER``.

Each commit is checked out into its own git worktree (``/tmp/bench-<sha>``, detached) and
measured there with this checkout's Python (``.venv``): every benchmark runs with cwd and
``PYTHONPATH`` set to the worktree, so the worktree's modules are the ones imported (the
editable install's finder comes after ``sys.path``). The runs alternate, before, after,
before, after (``--rounds``, at least 2), so that the machine's noise shows in each
side's spread. Measured, each with the quicker options below (``--full``: the benchmarks'
own defaults):

- ``benchmarks.prepare_scale``: in-process prepare p50/p99 at 1k and 10k records
  (cached renderer fed 2 new records, assemble, enforce);
- ``benchmarks.run``, once per processor driver: the processor's CPU µs per event while
  draining a backlog (faust, the default driver, and aiokafka), and with the aiokafka
  driver the HTTP prepare's server-side p50/p99 at 1k and 10k records;
- ``benchmarks.prepare_cold``: cold prepare at 100k records (restart from the stored
  render state, and a full render).

Prints a markdown table (median of the rounds, min..max, after/before ratio) and writes
``build/bench/compare.json``. Needs the stack (``make up``), as ``make bench`` does.

``--env-before`` / ``--env-after NAME=VALUE`` (repeatable): settings of one side only,
e.g. a setting measured on one commit (``benchmarks.compare HEAD HEAD --env-after
ALC_PROCESSOR_BATCH_WITHIN_S=1``). A setting is measured so, in alternating rounds, not
by runs by hand: this machine's speed drifts with the hour (docs/scaling.md).

``--gate`` (issue 37's regression gate, a step of ``.ci/run``): the last landed commit
(``.ci/gate-baseline``; ``--baseline`` another) against ``HEAD``, 2 alternating rounds of
the short set ``GATE``: ``benchmarks.gate_probe`` (~20 s a round: CPU per agent step of
our processes at 8 agents, the processor's CPU per event over a 5k-event burst,
Prepare's server-side p99 at 10k records). Both sides' probes start together, each with
its own services (up for all its rounds), and are told in turn what to run; the
prepares alternate between the sides in batches of 50 (``driven_rounds``). This
checkout's probe runs on both sides (``python -P``, the side's worktree first on
``PYTHONPATH``): one workload, each side's own code. It fails (exit 1, the table
printed) when a gated measure is more than 25% worse beyond the rounds' noise: every
after round worse than every before round, and the after median above 1.25 x the before
median plus the before rounds' spread (``gate_verdicts``). Rounds that fail it so are
followed by one more round of both sides, and the gate judges all of them: a regression
fails again, one slow round (the 10k p99's tail) is outvoted. A measure the baseline does
not have (its code cannot run the probe) is not gated; one the after side lost fails.
A baseline that is not in the clone (a shallow clone, a rewritten history), or no
change since it, is reported and passes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import proc_cpu

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "build" / "bench" / "compare.json"

QUICK: dict[str, list[str]] = {
    "prepare_scale": [
        "--sizes",
        "1000,10000",
        "--calls",
        "200,100",
        "--naive-calls",
        "20,8",
        "--restarts",
        "0",
    ],
    "run_faust": ["--drivers", "faust", "--events", "10000", "--prepare-sizes", "1000"],
    "run_aiokafka": [
        *("--drivers", "aiokafka", "--events", "10000"),
        *("--prepare-sizes", "1000,10000", "--prepare-calls", "100"),
    ],
    "prepare_cold": ["--sizes", "100000", "--restarts", "10", "--calls", "30"],
}
FULL: dict[str, list[str]] = {
    "prepare_scale": [
        "--sizes",
        "1000,10000",
        "--calls",
        "200,100",
        "--naive-calls",
        "200,40",
        "--restarts",
        "0",
    ],
    "run_faust": ["--drivers", "faust", "--prepare-sizes", "1000"],
    "run_aiokafka": ["--drivers", "aiokafka", "--prepare-sizes", "1000,10000"],
    "prepare_cold": ["--sizes", "100000"],
}

# The gate's short set: ~25 s a round of each side on our 2-core machine.
GATE: dict[str, list[str]] = {"gate_probe": []}
# Gated measures (all lower is better) and the worsening that fails the gate.
GATED = (
    "processor CPU µs/event (ingest burst)",
    "CPU ms per agent step, our processes (8 agents)",
    "prepare 10k p99 ms (HTTP, server)",
)
# The commit the gate compares with: the last landed one (.ci/gate-baseline says how it
# is updated); its first word that is not a comment is a full sha.
BASELINE_FILE = REPO / ".ci" / "gate-baseline"
# The gate's prepares at 10k records, per side per round: batches alternating between
# the sides. A round's p99 is its 5th slowest call. Of 120 calls (the 2nd slowest) the
# same code's rounds ranged 5.7-10.2 ms, a tail call or two sharing the machine with the
# previous call's background write deciding it; of 500, 3.5-5.9 ms (docs/scaling.md,
# eleventh stop).
PREP_BATCHES, PREP_BATCH = 10, 50
# Run from this checkout (``python -P`` the file: the side's worktree stays first on
# sys.path), not from the side's worktree: one workload for both sides.
OWN_SCRIPT = {"gate_probe"}
GATE_LIMIT = 0.25
# Rounds added when the gate's rounds fail it on a value: a regression fails again with
# them, one slow round is outvoted (the 10k p99 of one after round of the same code,
# 6.59 ms against 3.73-4.03, failed a gate whose rounds agreed otherwise).
CONFIRM_ROUNDS = 1
# Before each side's agents and before the prepares, the machine is let settle: until a
# half second passes with less than this share of its CPU busy (both sides' idle
# services poll), at most SETTLE_MAX_S.
SETTLE_BUSY, SETTLE_MAX_S, SETTLE_STEP_S = 0.2, 20.0, 0.5

Metrics = dict[str, float]
Runs = dict[str, list[Metrics]]  # each side's rounds


def log(msg: str) -> None:
    print(f"[bench-compare] {msg}", file=sys.stderr, flush=True)


def git(*args: str) -> str:
    out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout.strip()


def worktree(sha: str) -> Path:
    """The detached worktree of ``sha`` under /tmp (reused when it is already there),
    named after this checkout too: a CI clone and a working copy never share one."""
    path = Path(f"/tmp/bench-{sha[:12]}-{hashlib.sha1(str(REPO).encode()).hexdigest()[:6]}")
    if not (path / ".git").exists():
        git("worktree", "add", "--detach", str(path), sha)
    return path


def _by_records(rows: list[dict[str, Any]], n: int) -> dict[str, Any]:
    return next(r for r in rows if r["records"] == n)


def _scale(data: dict[str, Any]) -> Metrics:
    m: Metrics = {}
    for n, label in ((1000, "1k"), (10000, "10k")):
        r = _by_records(data["sizes"], n)
        m[f"prepare {label} p50 ms (in-process)"] = r["ours_p50_ms"]
        m[f"prepare {label} p99 ms (in-process)"] = r["ours_p99_ms"]
    return m


def _faust(log_text: str) -> Metrics:
    cpu = re.search(r"([\d,]+) events/s; processor CPU ([\d,]+) µs per event", log_text)
    if cpu is None:
        raise ValueError("no 'processor CPU' line in the log")
    return {
        "processor CPU µs/event (faust, drain)": float(cpu[2].replace(",", "")),
        "processor drain events/s (faust)": float(cpu[1].replace(",", "")),
    }


def _aiokafka(data: dict[str, Any]) -> Metrics:
    m: Metrics = {
        "processor CPU µs/event (aiokafka, drain)": data["ingest"]["processor_cpu_us_per_event"],
        "processor drain events/s (aiokafka)": data["ingest"]["processor_drain_events_per_s"],
    }
    # One row per --prepare-sizes value; its "records" is the thread's count at the first
    # prepare (the run's own records included), not the size asked for: labelled by the
    # nearer of 1k and 10k.
    for r in data["prepare"]:
        label = "1k" if r["records"] < 3000 else "10k"
        m[f"prepare {label} p50 ms (HTTP, server)"] = r["server_p50_ms"]
        m[f"prepare {label} p99 ms (HTTP, server)"] = r["server_p99_ms"]
    return m


def _cold(data: dict[str, Any]) -> Metrics:
    r = _by_records(data["sizes"], 100_000)
    return {
        "cold prepare 100k p50 ms (restart)": r["cold_restart_p50_ms"],
        "cold prepare 100k p99 ms (restart)": r["cold_restart_p99_ms"],
        "cold prepare 100k p99 ms (full render)": r["cold_full_p99_ms"],
    }


def _agents(data: dict[str, Any]) -> Metrics:
    m: Metrics = {}
    for lv in data["levels"]:
        k = lv["agents"]
        m[f"CPU ms per agent step, our processes ({k} agents)"] = lv["cpu_ms_per_step"]["ours"]
        m[f"agent steps/s ({k} agents)"] = lv["steps_per_s"]
        m[f"agent prepare p99 ms ({k} agents)"] = lv["prepare_p99_ms"]
        if "pg_transactions_per_step" in lv:
            m[f"PostgreSQL transactions per agent step ({k} agents)"] = lv[
                "pg_transactions_per_step"
            ]
        # Where a change of "ours" comes from (not gated): each process's CPU per step, as
        # benchmarks.agents names them (PostgreSQL's backends by client left out).
        for name, ms in lv["cpu_ms_per_step"].items():
            if name != "ours" and ":" not in name:
                m[f"CPU ms per agent step, {name} ({k} agents)"] = ms
    return m


def _probe(data: dict[str, Any]) -> Metrics:
    m = _agents({"levels": [data["agents"]]})
    p = data["prepare"]
    m["processor CPU µs/event (ingest burst)"] = data["processor_cpu_us_per_event"]
    m["prepare 10k p50 ms (HTTP, server)"] = p["server_p50_ms"]
    m["prepare 10k p99 ms (HTTP, server)"] = p["server_p99_ms"]
    return m


# Where each benchmark's numbers are read: its JSON report, or (the faust driver's run)
# its log: benchmarks.run prints the processor's CPU per event while draining, before its
# no-op faust ceiling, which does not authenticate to a SASL broker and then fails the run.
READERS: dict[str, tuple[str, Callable[[Any], Metrics]]] = {
    "prepare_scale": ("prepare_scale.json", _scale),
    "run_faust": ("", _faust),
    "run_aiokafka": ("results.json", _aiokafka),
    "prepare_cold": ("prepare_cold.json", _cold),
    "agents": ("agents.json", _agents),
    "gate_probe": ("gate_probe.json", _probe),
}


def _command(name: str) -> list[str]:
    if name in OWN_SCRIPT:
        return [sys.executable, "-P", str(REPO / "benchmarks" / f"{name}.py")]
    return [sys.executable, "-m", f"benchmarks.{'run' if name.startswith('run_') else name}"]


def _env(wt: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a benchmark run on the worktree ``wt``'s code, with ``extra``
    (``--env-before`` / ``--env-after``) over it."""
    env = {**os.environ, "PYTHONPATH": str(wt), "PYTHONUNBUFFERED": "1", **(extra or {})}
    env.setdefault("ALC_TOPIC_PARTITIONS", "4")  # as the Makefile exports for make bench
    # The stack's secrets live in this checkout's state dir (deploy/kafka.sh wrote them);
    # the worktree keeps its own state dir for the services' slot locks.
    secrets = REPO / ".state" / "secrets"
    env.setdefault("ALC_KAFKA_CREDENTIALS_FILE", str(secrets / "kafka-users.env"))
    env.setdefault("ALC_BUS_SECRETS_DIR", str(secrets))
    return env


def measure(
    wt: Path, opts: dict[str, list[str]], tag: str, extra: dict[str, str] | None = None
) -> tuple[Metrics, list[str]]:
    """One round of every benchmark in the worktree ``wt`` (``extra``: settings over the
    environment); what failed is named, not fatal."""
    env = _env(wt, extra)
    metrics: Metrics = {}
    failed: list[str] = []
    logs = REPO / "build" / "bench" / "compare-logs"
    logs.mkdir(parents=True, exist_ok=True)
    for name, args in opts.items():
        out_file, reader = READERS[name]
        log_file = logs / f"{tag}-{name}.log"
        result = wt / "build" / "bench" / out_file if out_file else log_file
        result.unlink(missing_ok=True)
        t0 = time.monotonic()
        with log_file.open("w") as fh:
            rc = subprocess.run(
                [*_command(name), *args],
                cwd=wt,
                env=env,
                stdout=fh,
                stderr=subprocess.STDOUT,
            ).returncode
        log(f"{tag} {name}: rc {rc} in {time.monotonic() - t0:.0f} s")
        try:
            text = result.read_text()
            metrics.update(reader(json.loads(text) if out_file else text))
        except (OSError, KeyError, StopIteration, ValueError) as e:
            failed.append(f"{name} (rc {rc}: {type(e).__name__} {e})")
    return metrics, failed


def summarize(runs: list[Metrics]) -> dict[str, Any]:
    keys = dict.fromkeys(k for r in runs for k in r)
    out: dict[str, Any] = {}
    for k in keys:
        vals = [r[k] for r in runs if k in r]
        out[k] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
        out[k]["values"] = vals
    return out


def _cell(s: dict[str, Any] | None) -> str:
    if s is None:
        return "n/a"
    return f"{s['median']:,.2f} ({s['min']:,.2f}..{s['max']:,.2f})"


def gate_verdicts(
    before: dict[str, Any],
    after: dict[str, Any],
    limit: float = GATE_LIMIT,
    before_ran: bool = True,
) -> dict[str, str]:
    """Per gated measure: "ok", "FAILED (...)" or "n/a (...)". More than ``limit`` worse
    beyond the noise: every after round worse than every before round, and the after
    median above the before median by more than ``limit`` of it plus the before rounds'
    spread (max - min: the noise the machine showed on the same code). A measure the
    baseline's rounds did not have (one added since) is not gated; ``before_ran``
    false — no round of the baseline's code ran, e.g. this checkout's probe uses what
    the baseline lacks — fails every measure: a gate that measured nothing is no pass."""
    out = {}
    for k in GATED:
        sb, sa = before.get(k), after.get(k)
        if sa is None:  # the change (or the machine) broke the measure: not a pass
            out[k] = "FAILED (not measured after)"
            continue
        if not before_ran:
            out[k] = "FAILED (no round of the baseline ran: see its log)"
            continue
        if sb is None:
            out[k] = "n/a (not measured before)"
            continue
        bar = sb["median"] * (1 + limit) + (sb["max"] - sb["min"])
        if sa["min"] > sb["max"] and sa["median"] > bar:
            out[k] = f"FAILED (median after > {bar:,.2f}: before x {1 + limit:.2f} + its spread)"
        else:
            out[k] = "ok"
    return out


def suspect(runs: Runs) -> bool:
    """Whether ``runs`` fail the gate on a measured value (a measure lost is not measured
    again): the rounds are then too few to tell a regression from one slow round."""
    verdicts = gate_verdicts(summarize(runs["before"]), summarize(runs["after"]))
    return any(v.startswith("FAILED (median") for v in verdicts.values())


def table(
    before: dict[str, Any],
    after: dict[str, Any],
    b: str,
    a: str,
    gate: dict[str, str] | None = None,
) -> str:
    lines = [
        f"| measure | before `{b[:8]}` median (min..max) | after `{a[:8]}` median (min..max)"
        " | after / before |" + (" gate |" if gate is not None else ""),
        "|---|---|---|---|" + ("---|" if gate is not None else ""),
    ]
    for k in dict.fromkeys([*before, *after]):
        sb, sa = before.get(k), after.get(k)
        ratio = f"{sa['median'] / sb['median']:.2f}" if sb and sa and sb["median"] else "n/a"
        verdict = f" {gate.get(k, '')} |" if gate is not None else ""
        lines.append(f"| {k} | {_cell(sb)} | {_cell(sa)} | {ratio} |{verdict}")
    return "\n".join(lines)


class _Driven:
    """One side's ``benchmarks.gate_probe --driven``: its services up throughout, a round
    run each time it is told; its output kept in ``log``."""

    def __init__(self, wt: Path, log_path: Path) -> None:
        self.log_path, self.out = log_path, log_path.open("w")
        self.proc = subprocess.Popen(
            [*_command("gate_probe"), "--driven"],
            cwd=wt,
            env=_env(wt),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def until(self, prefix: str) -> str | None:
        """Its output up to the first line starting with ``prefix`` (None: it exited)."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.out.write(line)
            self.out.flush()
            if line.startswith(prefix):
                return line
        return None

    def ask(self, command: str, answer: str) -> Any:
        """Send ``command``; the JSON of its ``answer`` line (None: the probe exited)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return None
        line = self.until(answer + " ")
        return None if line is None else json.loads(line[len(answer) + 1 :])

    def close(self) -> int:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.until("\0")  # the rest of its output, to its exit
        rc = self.proc.wait(timeout=120)
        self.out.close()
        return rc


def settle() -> float:
    """Wait until what ran before has finished on the machine (a side's compaction jobs,
    its processor catching up, PostgreSQL's autovacuum of its writes); the seconds
    waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < SETTLE_MAX_S:
        before = proc_cpu.snapshot()
        time.sleep(SETTLE_STEP_S)
        if proc_cpu.busy_share(before, proc_cpu.snapshot()) < SETTLE_BUSY:
            break
    return time.monotonic() - t0


def driven_rounds(
    trees: dict[str, Path], n: int, doubtful: Callable[[Runs], bool] | None = None
) -> tuple[Runs, dict[str, list[str]]]:
    """The gate's ``n`` rounds: both sides' probes start together, each with its own
    services, which stay up; a round is each side's agents and burst in turn, then their
    prepares in alternating batches (``PREP_BATCHES`` of ``PREP_BATCH`` each), so that
    both see the same machine, each side's answered by its Prepare started afresh for
    them (one process's slow tail would otherwise set a side's p99 in every round). What
    ran before is let finish (``settle``) before each side's agents and before the
    prepares, and the side that goes first changes every round: a side always second,
    meeting what the first left running, measured 1.06x the CPU per step and 1.4x
    PostgreSQL's share on the same code. When ``doubtful`` says the
    ``n`` rounds fail the gate, ``CONFIRM_ROUNDS`` more are run."""
    logs = REPO / "build" / "bench" / "compare-logs"
    logs.mkdir(parents=True, exist_ok=True)
    probes = {side: _Driven(wt, logs / f"gate-{side}.log") for side, wt in trees.items()}
    runs: Runs = {"before": [], "after": []}
    failures: dict[str, list[str]] = {"before": [], "after": []}
    alive = {side: p.until("READY") is not None for side, p in probes.items()}

    def ask(side: str, command: str, answer: str, i: int) -> Any:
        got = probes[side].ask(command, answer) if alive[side] else None
        if got is None and alive[side]:
            alive[side] = False
            failures[side].append(f"round {i + 1}: gate_probe exited (see {logs})")
        return got

    i = 0
    while i < n or (doubtful is not None and i < n + CONFIRM_ROUNDS and doubtful(runs)):
        t0 = time.monotonic()
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        rows = {}
        for side in order:
            settle()
            rows[side] = ask(side, "round", "ROUND", i)
        for side in order:
            ask(side, "fresh", "FRESH", i)
        times: dict[str, list[float]] = {"before": [], "after": []}
        settle()
        tp = time.monotonic()
        for _ in range(PREP_BATCHES):
            for side in order:
                times[side] += ask(side, f"prep {PREP_BATCH}", "PREP", i) or []
        for side, row in rows.items():
            if row is not None and times[side]:
                ms = sorted(times[side])
                row["prepare"] = {"server_p50_ms": _pct(ms, 50), "server_p99_ms": _pct(ms, 99)}
                runs[side].append(_probe(row))
        now = time.monotonic()
        log(f"round {i + 1}: {now - t0:.0f} s (its prepares {now - tp:.0f} s)")
        i += 1
    for side, p in probes.items():
        if (rc := p.close()) != 0:
            failures[side].append(f"gate_probe rc {rc} (see {p.log_path})")
    return runs, failures


def _pct(s: list[float], p: float) -> float:
    """Of sorted ``s``, as ``benchmarks.run.pct``."""
    return round(s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))], 3)


def recorded_baseline(path: Path = BASELINE_FILE) -> str | None:
    """The commit ``path`` records: its first word outside ``#`` comments."""
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        if words := line.split("#", 1)[0].split():
            return words[0]
    return None


def gate_skip(before: str | None, after: str) -> str | None:
    """Why the gate has nothing to compare (None: it has)."""
    if before is None:
        return f"no baseline recorded in {BASELINE_FILE.relative_to(REPO)}"
    known = ["git", "-C", str(REPO), "cat-file", "-e", f"{before}^{{commit}}"]
    if subprocess.run(known, capture_output=True).returncode != 0:
        return f"no baseline: {before[:12]} is not in this clone"
    same = ["git", "-C", str(REPO), "diff", "--quiet", before, after, "--", "."]
    if subprocess.run([*same, f":(exclude){BASELINE_FILE.relative_to(REPO)}"]).returncode == 0:
        return f"no change since the baseline {before[:12]}"
    return None


def rounds(
    trees: dict[str, Path],
    opts: dict[str, list[str]],
    n: int,
    envs: dict[str, dict[str, str]] | None = None,
) -> tuple[dict[str, list[Metrics]], dict[str, list[str]]]:
    """``n`` alternating rounds: before, after, before, after... (``envs``: each side's
    settings)."""
    runs: dict[str, list[Metrics]] = {"before": [], "after": []}
    failures: dict[str, list[str]] = {"before": [], "after": []}
    for i in range(n):
        for side in ("before", "after"):
            m, failed = measure(trees[side], opts, f"r{i + 1}-{side}", (envs or {}).get(side))
            runs[side].append(m)
            failures[side] += [f"round {i + 1}: {f}" for f in failed]
    return runs, failures


def env_pairs(pairs: list[str], ap: argparse.ArgumentParser) -> dict[str, str]:
    """``NAME=VALUE`` pairs as a mapping; anything else is a usage error."""
    out = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name:
            ap.error(f"not NAME=VALUE: {pair!r}")
        out[name] = value
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", nargs="?", help="a commit (--gate: --baseline)")
    ap.add_argument("after", nargs="?", help="a commit (--gate: HEAD)")
    ap.add_argument(
        "--rounds", type=int, help="alternating rounds (at least 2; default 3, --gate 2)"
    )
    ap.add_argument("--full", action="store_true", help="the benchmarks' larger defaults")
    ap.add_argument("--gate", action="store_true", help="the regression gate (module doc)")
    ap.add_argument("--baseline", help="--gate: the commit to compare with (.ci/gate-baseline)")
    ap.add_argument("--only", help="these benchmarks of the set (e.g. agents,run_aiokafka)")
    ap.add_argument("--agents", help="benchmarks.agents at these K (e.g. 48) for the set's")
    ap.add_argument("--keep-worktrees", action="store_true")
    for side in ("before", "after"):
        ap.add_argument(
            f"--env-{side}",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help=f"a setting of the {side} side only (repeatable)",
        )
    return ap


def main() -> None:
    ap = _parser()
    args = ap.parse_args()
    envs = {side: env_pairs(getattr(args, f"env_{side}"), ap) for side in ("before", "after")}
    if args.gate and any(envs.values()):
        ap.error("--gate compares commits as they are: no --env-before / --env-after")
    if args.gate:
        args.before = args.before or args.baseline or recorded_baseline()
        args.after = args.after or "HEAD"
        if (why := gate_skip(args.before, args.after)) is not None:
            print(f"gate: ok, nothing compared: {why}")
            return
    if not (args.before and args.after):
        ap.error("BEFORE and AFTER, or --gate")
    n = max(2, args.rounds or (2 if args.gate else 3))
    shas = {"before": git("rev-parse", args.before), "after": git("rev-parse", args.after)}
    opts = dict(GATE if args.gate else FULL if args.full else QUICK)
    if args.agents:  # not a gate's measure any more: another K, a 40 s window
        opts["agents"] = ["--agents", args.agents, "--seconds", "40"]
    if args.only:
        opts = {k: v for k, v in opts.items() if k in args.only.split(",")}
    trees = {side: worktree(sha) for side, sha in shas.items()}
    t0 = time.monotonic()
    try:
        if opts == GATE:
            runs, failures = driven_rounds(trees, n, suspect if args.gate else None)
        else:
            runs, failures = rounds(trees, opts, n, envs)
    finally:
        if not args.keep_worktrees:
            for wt in set(trees.values()):  # one tree when both sides are one commit
                git("worktree", "remove", "--force", str(wt))
    stats = {side: summarize(r) for side, r in runs.items()}
    gate = None
    if args.gate:
        gate = gate_verdicts(stats["before"], stats["after"], before_ran=bool(runs["before"]))
    result = {
        "commits": shas,
        "env": envs,
        "options": opts,
        "rounds": max(n, *(len(r) for r in runs.values())),
        "minutes": round((time.monotonic() - t0) / 60, 1),
        "runs": runs,
        "stats": stats,
        "failures": failures,
        "gate": gate,
    }
    out = OUT.with_name("gate.json") if args.gate else OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False))
    print(table(stats["before"], stats["after"], shas["before"], shas["after"], gate))
    for side, extra in envs.items():
        if extra:
            print(f"- {side}: " + " ".join(f"{k}={v}" for k, v in extra.items()))
    for side, f in failures.items():
        for line in f:
            print(f"- {side} failed: {line}")
    log(f"wrote {out} ({result['minutes']} min)")
    if gate is not None:
        failed = [k for k, v in gate.items() if v.startswith("FAILED")]
        print(f"\ngate: {'FAILED: ' + ', '.join(failed) if failed else 'ok'}")
        sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
