"""What crosses between a parent task and a child task (R13.2) under the release's
``child_transfer_policy`` (R17). Pure.

Background (parent → child): the records the parent exported, oldest first (session
order), are shown to the child as material while they fit ``max_background_refs`` (a
count) and ``max_background_tokens`` (their stored token counts, summed; ``None``: no
token limit). The first record that does not fit and every later one are left out, each
with a ``dropped`` decision and its reason (R4.2) — the parent chose them in that order,
and a later, smaller record never jumps the queue.

Result (child → parent): a ``child_result`` whose text has more than
``max_result_tokens`` tokens (``None``: no cap) is shown in the parent as a view — the
longest prefix within the cap, the full length and a ``read_content`` reference to the
record (R10.3) — never as a silently cut text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from domain.policy.sections import ChildTransferPolicy
from domain.window.record_view import RecordView

CountFn = Callable[[str], int]


def choose_background(
    records: Sequence[RecordView], policy: ChildTransferPolicy | None
) -> tuple[list[RecordView], list[dict[str, Any]]]:
    """The background records shown to the child and the decisions for those left out."""
    ordered = sorted(records, key=lambda r: r.session_sequence)
    if policy is None:
        return ordered, []
    kept: list[RecordView] = []
    left: list[dict[str, Any]] = []
    total = 0
    for rec in ordered:
        if left:
            reason = left[0]["reason"]
        elif len(kept) >= policy.max_background_refs:
            reason = "background_over_max_refs"
        elif (
            policy.max_background_tokens is not None
            and total + rec.token_count > policy.max_background_tokens
        ):
            reason = "background_over_max_tokens"
        else:
            kept.append(rec)
            total += rec.token_count
            continue
        left.append(_left_out(rec, reason, policy))
    return kept, left


def _left_out(rec: RecordView, reason: str, policy: ChildTransferPolicy) -> dict[str, Any]:
    limit = (
        policy.max_background_refs
        if reason == "background_over_max_refs"
        else policy.max_background_tokens
    )
    return {
        "block_id": f"background:{rec.record_id}",
        "decision": "dropped",
        "reason": reason,
        "record_ids": [rec.record_id],
        "tokens": rec.token_count,
        "limit": limit,
    }


def result_over_cap(rec: RecordView, cap: int) -> bool:
    """Metadata only, like a large result (R10.3): the stored count decides; a record of
    which only a prefix was loaded is never shown whole."""
    return rec.token_count > cap or rec.full_length > len(rec.text)


def capped_result(
    rec: RecordView, cap: int | None, preview_chars: int, count: CountFn
) -> dict[str, Any] | None:
    """The parent's message for a child result over ``cap`` (None: within it, or no cap)."""
    if cap is None or not result_over_cap(rec, cap):
        return None
    return {
        "role": "user",
        "content": result_view(rec, cap, preview_chars, count),
        "block": "material",
        "decision": "externalized",
        "reason": "child_result_over_max_result_tokens",
        "content_ref": f"rec:{rec.record_id}",
    }


def result_view(rec: RecordView, cap: int, preview_chars: int, count: CountFn) -> str:
    """A child result over the cap, as the parent sees it: the longest prefix (at most
    ``preview_chars`` characters) whose tokens stay within ``cap``, the whole length and
    how to read the rest."""
    n = min(preview_chars, len(rec.text))
    shown = rec.text[:n]
    while n and count(shown) > cap:
        n = n * cap // count(shown)
        shown = rec.text[:n]
    total = rec.full_length
    unit = "bytes" if rec.content_length >= 0 else "characters"
    return (
        f"[child task result — material; {total} {unit}, {rec.token_count} tokens, over the"
        f" release's max_result_tokens {cap}; showing characters 0-{len(shown)}. Read the"
        f' rest with read_content(ref="rec:{rec.record_id}", offset={len(shown)},'
        f" limit=8000); readable range 0-{total} {unit}.]\n{shown}"
    )
