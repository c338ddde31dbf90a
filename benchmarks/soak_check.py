"""The soak's verdict: what the database holds against what the load was told.

- **lost**: an acknowledged key with no committed record (dead-lettered counts as lost);
- **duplicated**: more than one record for a (session, event_key) or (session,
  operation_id, kind);
- **never sent**: a record whose key the load never sent;
- **sequence gaps**: ``session_sequence`` not exactly 1..n (and ``next_session_sequence``
  not n+1), or a thread's ``instance_sequence`` not 1..m;
- **counter drift**: ``sessions.user_turns`` / ``model_steps`` against the counts rebuilt
  from the records (run starts; action model messages of a run's main thread);
- **model calls repeated** (R15.3): a job whose summarizer ran to completion more than
  once — the compaction service logs one "job <id>: <status> at <stage> ... calls=N" line
  per handling that did the work, and "republishing the saved outcome" when a redelivery
  found the saved candidate instead.

Pure: the rows and log lines come from ``benchmarks.soak_db``.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

WORKED = re.compile(r"job (\S+): \w+ at \w+ \(.*\) calls=(\d+)")
REPUBLISHED = re.compile(r"job (\S+): republishing the saved outcome")


def check_records(
    rows: Mapping[str, list[dict[str, Any]]],
    attempted: Mapping[str, set[str]],
    acked: Mapping[str, set[str]],
) -> dict[str, Any]:
    recs = rows["records"]
    by_key = Counter((r["session_id"], r["event_key"]) for r in recs)
    by_op = Counter(
        (r["session_id"], r["operation_id"], r["kind"]) for r in recs if r["operation_id"]
    )
    refused = {(o["session_id"], o["event_key"]): o["code"] for o in rows["outcomes"]}
    acked_keys = {(s, k) for s, keys in acked.items() for k in keys}
    sent_keys = {(s, k) for s, keys in attempted.items() for k in keys}
    lost = sorted(acked_keys - by_key.keys())
    duplicated = sum(n - 1 for n in by_key.values() if n > 1)
    duplicated += sum(n - 1 for n in by_op.values() if n > 1)
    never_sent = sorted(set(by_key) - sent_keys)
    return {
        "acknowledged": len(acked_keys),
        "sent_not_acknowledged": len(sent_keys - acked_keys),
        "records": len(recs),
        "lost": len(lost),
        "lost_examples": [f"{s}/{k} ({refused.get((s, k), 'no record')})" for s, k in lost[:10]],
        "duplicated": duplicated,
        "never_sent": len(never_sent),
        "never_sent_examples": [f"{s}/{k}" for s, k in never_sent[:10]],
        "refused_or_dead_lettered": dict(Counter(refused.values())),
        "sequence_gaps": sequence_gaps(recs, rows["sessions"], rows["threads"]),
        "counter_drift": counter_drift(recs, rows["sessions"]),
    }


def _contiguous(seqs: Iterable[int], next_seq: int | None) -> int:
    """How far ``seqs`` is from exactly 1..n (missing + repeated + a wrong next value)."""
    got = sorted(seqs)
    want = range(1, len(got) + 1)
    bad = len(set(want) - set(got)) + (len(got) - len(set(got)))
    return bad + (1 if next_seq is not None and next_seq != len(got) + 1 else 0)


def sequence_gaps(
    recs: list[dict[str, Any]], sessions: list[dict[str, Any]], threads: list[dict[str, Any]]
) -> int:
    per_session: dict[str, list[int]] = defaultdict(list)
    per_thread: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for r in recs:
        per_session[r["session_id"]].append(r["session_sequence"])
        if r["instance_sequence"] is not None:
            per_thread[(r["session_id"], r["run_id"], r["instance_id"])].append(
                r["instance_sequence"]
            )
    gaps = sum(
        _contiguous(per_session.get(s["session_id"], []), s["next_session_sequence"])
        for s in sessions
    )
    for t in threads:
        key = (t["session_id"], t["run_id"], t["instance_id"])
        gaps += _contiguous(per_thread.get(key, []), t["next_instance_sequence"])
    return gaps


def counter_drift(recs: list[dict[str, Any]], sessions: list[dict[str, Any]]) -> int:
    """Sessions whose counters differ from the records: R8.1 counts run starts, R8.2
    action model messages of a run's main thread."""
    turns: Counter[str] = Counter()
    steps: Counter[str] = Counter()
    for r in recs:
        if r["kind"] == "run_started":
            turns[r["session_id"]] += 1
        elif r["kind"] == "assistant_message" and r["purpose"] == "action" and r["main"]:
            steps[r["session_id"]] += 1
    return sum(
        1
        for s in sessions
        if s["user_turns"] != turns[s["session_id"]] or s["model_steps"] != steps[s["session_id"]]
    )


def check_compaction(jobs: list[dict[str, Any]], log_lines: Iterable[str]) -> dict[str, Any]:
    """``model_calls_repeated`` is None when the logs show no work at all while candidates
    were saved: the evidence is missing (a changed log line?), which is not a pass."""
    worked: Counter[str] = Counter()
    calls_made = 0
    republished = 0
    for line in log_lines:
        if m := WORKED.search(line):
            calls = int(m.group(2))
            calls_made += calls
            if calls:
                worked[m.group(1)] += 1
        elif REPUBLISHED.search(line):
            republished += 1
    ours = {j["job_id"] for j in jobs}
    saved = sum(int(j["model_calls"] or 0) for j in jobs)
    repeated = sum(n - 1 for job, n in worked.items() if n > 1 and job in ours)
    return {
        "jobs": len(jobs),
        "jobs_by_status": dict(Counter(str(j["status"]) for j in jobs)),
        "candidates_saved": sum(1 for j in jobs if j["op_status"] is not None),
        "summarizer_calls_saved": saved,
        "summarizer_calls_logged": calls_made,
        "republished_from_saved": republished,
        "model_calls_repeated": None if saved and not calls_made else repeated,
    }


def next_summary_after(jobs: list[dict[str, Any]], wall: float, back_s: float) -> float | None:
    """Seconds from a fault (``time.time()`` at ``wall``) to the first compaction candidate
    saved once the faulty part was back (``back_s`` later); None if none was."""
    saved = [float(j["saved_at"]) for j in jobs if j["saved_at"] is not None]
    later = [t for t in saved if t >= wall + back_s]
    return round(min(later) - wall, 2) if later else None
