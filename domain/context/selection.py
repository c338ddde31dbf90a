"""What a compaction covers (R11.1, R11.2, R9.2, R9.6). Pure.

History is cut only at complete-group boundaries: an assistant message and the results
of all its calls are one group, never split, and an unfinished group ends the
compressible prefix (a safe boundary). A call whose result never came stops being
unfinished once the agent moved past it — a later model step completed, its run ended, or
a later record belongs to another run: the group is then covered whole, the call with an
``unknown`` outcome (R2.4, R5.1), so one crashed tool never blocks compaction. The
latest user input, pinned records (active skills, constraints) and the most recent
complete groups are kept verbatim. The covered groups are split into segments that each
fit one summary request; a single group larger than a request is flagged to be
externalized first, never cut.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from domain.context.rendering import RecordView


@dataclass(frozen=True)
class Group:
    record_ids: tuple[str, ...]
    first_sequence: int
    last_sequence: int
    tokens: int
    kind: str  # interaction | user | state | material
    complete: bool  # every call answered, or the agent moved past its open calls
    # Calls of the group without a result: in flight while ``complete`` is False, answered
    # ``unknown`` for compaction once it is True.
    open_calls: tuple[str, ...] = ()


@dataclass(frozen=True)
class Selection:
    covered: tuple[Group, ...]
    kept: tuple[Group, ...]
    source_watermark: int  # last session_sequence any covered group reaches (0: none)
    compressible_tokens: int
    deferral_reason: str | None = None

    @property
    def covered_ranges(self) -> tuple[tuple[int, int], ...]:
        """Covered session_sequence ranges, merged where adjacent in the selection."""
        out: list[tuple[int, int]] = []
        for g in self.covered:
            if out and out[-1][1] + 1 >= g.first_sequence:
                out[-1] = (out[-1][0], max(out[-1][1], g.last_sequence))
            else:
                out.append((g.first_sequence, g.last_sequence))
        return tuple(out)


OPEN_CALL = "open_call_in_flight"  # a deferral reason's prefix: ``open_call_in_flight:<call id>``

_KIND = {"user_input": "user", "supplement": "user", "child_result": "material"}


_INTERACTION = frozenset({"assistant_message", "tool_call", "tool_outcome"})


def build_groups(records: Sequence[RecordView]) -> list[Group]:
    """Group records (session order) into message groups, ordered by first sequence.

    One pass with per-group accumulators: it runs over whole histories (100k tokens,
    thousands of records) on every compaction job and pre-emptive check."""
    open_calls: dict[str, int] = {}  # call_id -> index of its group
    ids: list[list[str]] = []
    first: list[RecordView] = []
    last_seq: list[int] = []
    tokens: list[int] = []
    waiting: list[int] = []  # results still missing per group
    runs: list[str | None] = []
    for rec in records:
        kind = rec.kind
        payload = rec.payload
        if kind == "tool_outcome" or kind == "tool_call":
            call_id: str = payload.get("call_id") or ""
            i = open_calls.get(call_id) if call_id else None
            if i is not None:
                if kind == "tool_outcome":
                    del open_calls[call_id]
                    waiting[i] -= 1
                ids[i].append(rec.record_id)
                last_seq[i] = max(last_seq[i], rec.session_sequence)
                tokens[i] += rec.token_count
                continue
        n = len(ids)
        ids.append([rec.record_id])
        first.append(rec)
        last_seq.append(rec.session_sequence)
        tokens.append(rec.token_count)
        runs.append(rec.run_id)
        calls: list[str] = []
        if kind == "assistant_message":
            calls = [c["call_id"] for c in payload.get("tool_calls") or ()]
        elif kind == "tool_call" and payload.get("call_id"):
            calls = [payload["call_id"]]
        waiting.append(len(set(calls)))
        for cid in calls:
            open_calls[cid] = n
    unanswered: dict[int, list[str]] = {}
    for cid, i in open_calls.items():
        unanswered.setdefault(i, []).append(cid)
    moved_on = _moved_on(first, waiting, runs, unanswered)
    return [
        Group(
            tuple(ids[i]),
            f.session_sequence,
            last_seq[i],
            tokens[i],
            "interaction" if f.kind in _INTERACTION else _KIND.get(f.kind, "state"),
            waiting[i] == 0 or i in moved_on,
            tuple(unanswered.get(i, ())),
        )
        for i, f in enumerate(first)
    ]


def _moved_on(
    first: Sequence[RecordView],
    waiting: Sequence[int],
    runs: Sequence[str | None],
    unanswered: dict[int, list[str]],
) -> frozenset[int]:
    """The groups with open calls the agent has moved past: a later model step (an
    interaction group with every call answered) completed after it, its run's end is
    recorded, or a later record belongs to another run. One backward pass."""
    if not unanswered:
        return frozenset()
    out: set[int] = set()
    later_step = False
    later_runs: set[str | None] = set()
    ended: set[str | None] = set()  # runs whose end is recorded later
    for i in range(len(first) - 1, -1, -1):
        moved = later_step or runs[i] in ended or later_runs - {runs[i]}
        if i in unanswered and moved:
            out.add(i)
        if waiting[i] == 0 and first[i].kind in _STEP_KINDS:
            later_step = True
        if first[i].kind in _RUN_ENDS:
            ended.add(runs[i])
        if len(later_runs) < 2:
            later_runs.add(runs[i])
    return frozenset(out)


_STEP_KINDS = frozenset({"assistant_message", "tool_call"})
_RUN_ENDS = frozenset({"run_finished", "run_cancelled"})


def select_prefix(
    groups: Sequence[Group], keep_recent: int, pinned: frozenset[str] = frozenset()
) -> Selection:
    """Cover the old prefix: everything before the first incomplete group, except the
    last ``keep_recent`` complete interaction groups, the latest user input and pinned
    records. Covers all eligible history — a turn-triggered compaction must really reduce
    even below target (R9.6); whether the target was reached is judged afterwards."""
    boundary = next((i for i, g in enumerate(groups) if not g.complete), len(groups))
    covered, kept = _split(groups, boundary, keep_recent, pinned)
    if not covered:
        reason = _deferral(groups, boundary, keep_recent, pinned)
        return Selection((), kept, 0, 0, deferral_reason=reason)
    return Selection(
        covered, kept, max(g.last_sequence for g in covered), sum(g.tokens for g in covered)
    )


def _split(
    groups: Sequence[Group], boundary: int, keep_recent: int, pinned: frozenset[str]
) -> tuple[tuple[Group, ...], tuple[Group, ...]]:
    """The covered and the kept groups when the compressible prefix ends at ``boundary``."""
    # Only a prefix is covered, so the summary always stands before what stays verbatim:
    # it ends at the first of the most recent complete interaction groups kept.
    recent = [i for i in range(boundary) if groups[i].kind == "interaction"]
    if keep_recent <= 0:
        end = boundary
    elif keep_recent <= len(recent):
        end = recent[-keep_recent]
        if end > 0 and groups[end - 1].kind == "user":
            end -= 1  # the question of the first kept interaction stays with it
    else:
        end = 0  # fewer complete interactions than must stay verbatim: cover nothing
    users = [i for i, g in enumerate(groups) if g.kind == "user"]
    keep = {users[-1]} if users else set()  # the latest user input stays verbatim (R11.1)
    keep.update(i for i, g in enumerate(groups) if pinned.intersection(g.record_ids))
    covered = tuple(g for i, g in enumerate(groups) if i < end and i not in keep)
    kept = tuple(g for i, g in enumerate(groups) if not (i < end and i not in keep))
    return covered, kept


def _deferral(
    groups: Sequence[Group], boundary: int, keep_recent: int, pinned: frozenset[str]
) -> str:
    """Why nothing is covered: ``open_call_in_flight:<call id>`` when a call still in flight
    is what holds the prefix back (without it, something would be covered)."""
    if boundary < len(groups) and groups[boundary].open_calls:
        unblocked = [g if g.complete else dataclasses.replace(g, complete=True) for g in groups]
        covered, _ = _split(unblocked, len(groups), keep_recent, pinned)
        if covered:
            return f"{OPEN_CALL}:{groups[boundary].open_calls[0]}"
    return "nothing_compressible"


@dataclass(frozen=True)
class Segment:
    groups: tuple[Group, ...]
    tokens: int
    oversized: bool  # one group larger than a request: externalize it first (R11.2)


def segment(covered: Sequence[Group], per_request_tokens: int) -> list[Segment]:
    """Split covered groups, in order, into segments of at most ``per_request_tokens``."""
    out: list[Segment] = []
    cur: list[Group] = []
    size = 0
    for g in covered:
        if g.tokens > per_request_tokens:
            if cur:
                out.append(Segment(tuple(cur), size, False))
                cur, size = [], 0
            out.append(Segment((g,), g.tokens, True))
            continue
        if size + g.tokens > per_request_tokens and cur:
            out.append(Segment(tuple(cur), size, False))
            cur, size = [], 0
        cur.append(g)
        size += g.tokens
    if cur:
        out.append(Segment(tuple(cur), size, False))
    return out


_TASK_KINDS = frozenset({"user_input", "supplement"})


def current_task_ids(records: Sequence[RecordView], run_id: str) -> frozenset[str]:
    """R4.4/R10.1/R11.1: the current task — the run's question and every supplement of
    the run — is a required block. It is never selected for compaction: pinned, it stays
    verbatim however long the run grows (a summary would shrink the goal to one line)."""
    return frozenset(r.record_id for r in records if r.run_id == run_id and r.kind in _TASK_KINDS)
