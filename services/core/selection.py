"""What a compaction covers (R11.1, R11.2, R9.2, R9.6). Pure.

History is cut only at complete-group boundaries: an assistant message and the results
of all its calls are one group, never split, and an unfinished group ends the
compressible prefix (a safe boundary). The latest user input, pinned records (active
skills, constraints) and the most recent complete groups are kept verbatim. The covered
groups are split into segments that each fit one summary request; a single group larger
than a request is flagged to be externalized first, never cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.core.assembly import RecordView


@dataclass(frozen=True)
class Group:
    record_ids: tuple[str, ...]
    first_sequence: int
    last_sequence: int
    tokens: int
    kind: str  # interaction | user | state | material
    complete: bool


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


_KIND = {"user_input": "user", "supplement": "user", "child_result": "material"}


def build_groups(records: Sequence[RecordView]) -> list[Group]:
    """Group records (session order) into message groups, ordered by first sequence."""
    groups: list[Group] = []
    open_calls: dict[str, int] = {}  # call_id -> index of its group in ``members``
    members: list[list[RecordView]] = []
    pending: list[set[str]] = []
    for rec in records:
        calls = rec.payload.get("tool_calls") or [] if rec.kind == "assistant_message" else []
        call_id = rec.payload.get("call_id")
        if rec.kind == "tool_outcome" and call_id in open_calls:
            i = open_calls.pop(call_id)
            members[i].append(rec)
            pending[i].discard(call_id)
            continue
        if rec.kind == "tool_call" and call_id in open_calls:
            members[open_calls[call_id]].append(rec)
            continue
        members.append([rec])
        ids = {c["call_id"] for c in calls}
        if rec.kind == "tool_call" and call_id:
            ids = {call_id}
        pending.append(set(ids))
        for cid in ids:
            open_calls[cid] = len(members) - 1
    for recs, waiting in zip(members, pending, strict=True):
        first = recs[0]
        kind = (
            "interaction"
            if first.kind in ("assistant_message", "tool_call", "tool_outcome")
            else _KIND.get(first.kind, "state")
        )
        groups.append(
            Group(
                record_ids=tuple(r.record_id for r in recs),
                first_sequence=first.session_sequence,
                last_sequence=max(r.session_sequence for r in recs),
                tokens=sum(r.token_count for r in recs),
                kind=kind,
                complete=not waiting,
            )
        )
    return groups


def select_prefix(
    groups: Sequence[Group], keep_recent: int, pinned: frozenset[str] = frozenset()
) -> Selection:
    """Cover the old prefix: everything before the first incomplete group, except the
    last ``keep_recent`` complete interaction groups, the latest user input and pinned
    records. Covers all eligible history — a turn-triggered compaction must really reduce
    even below target (R9.6); whether the target was reached is judged afterwards."""
    boundary = next((i for i, g in enumerate(groups) if not g.complete), len(groups))
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
    if not covered:
        return Selection((), kept, 0, 0, deferral_reason="nothing_compressible")
    return Selection(
        covered, kept, max(g.last_sequence for g in covered), sum(g.tokens for g in covered)
    )


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
