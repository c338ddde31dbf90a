"""The inspector's view of one model call (R4.2, R18): the blocks in order with role,
category, retention, tokens, decision and reason, and the budget items against the
InputBudget. Pure.

The call record keeps its dependency versions (snapshot boundary, the thread's last
sequence, the summary in effect), the protected manifest and the itemized budget; the
blocks are rebuilt from those and the source records with the assembler's own tables
(``domain.rendering.RETENTION`` / ``KEPT_BECAUSE``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from domain.rendering import KEPT_BECAUSE, RETENTION, RecordView

_ROLE = {
    "user_input": "user",
    "supplement": "user",
    "assistant_message": "assistant",
    "tool_call": "assistant",
    "tool_outcome": "tool",
    "child_result": "user",
}
_OWN_CATEGORY = {
    "user_input": "task",
    "supplement": "task",
    "assistant_message": "interactions",
    "tool_call": "interactions",
    "tool_outcome": "tool_results",
    "child_result": "material",
}


def _category(r: RecordView, through: int) -> str:
    if r.session_sequence <= through:
        return "history"
    return _OWN_CATEGORY.get(r.kind, "state")


def call_blocks(
    call: Mapping[str, Any],
    records: Sequence[RecordView],
    chain: Sequence[Mapping[str, Any]],
    inline_max_tokens: int,
) -> list[dict[str, Any]]:
    """Protected (required) blocks first, then the summary, then each source record with
    what was done to it."""
    deps = call.get("dependency_versions") or {}
    through = int(deps.get("through_session_sequence") or 0)
    manifest = call.get("manifest") or []
    blocks = _protected(manifest, (call.get("budget") or {}).get("items") or {}, records)
    covered = {i for s in chain for i in s.get("covered_record_ids") or ()}
    if chain:
        head = chain[0]
        blocks.append(
            _block(f"summary:{head['summary_id']}", "system", "summary", head["summary_tokens"])
            | {"retention": RETENTION["summary"], "reason": KEPT_BECAUSE["summary"]}
        )
    protected = {i for p in manifest for i in p.get("source_ids") or ()}
    for r in records:
        category = _category(r, through)
        b = _block(f"rec:{r.record_id}", _ROLE.get(r.kind, "system"), category, r.token_count)
        b |= {"record_id": r.record_id, "kind": r.kind, "sequence": r.session_sequence}
        if r.record_id in protected:
            b["retention"] = "required"
        if r.record_id in covered:
            b |= {"decision": "summarized", "reason": "covered_by_summary"}
        elif r.kind == "tool_outcome" and r.token_count > inline_max_tokens:
            b |= {"decision": "externalized", "reason": "large_result_view"}
        blocks.append(b)
    return blocks


def _block(block_id: str, role: str, category: str, tokens: int | None) -> dict[str, Any]:
    return {
        "block_id": block_id,
        "role": role,
        "category": category,
        "retention": RETENTION.get(category, "compressible"),
        "tokens": tokens,
        "decision": "kept",
        "reason": KEPT_BECAUSE.get(category, "in_thread"),
        "record_id": None,
    }


def _protected(
    manifest: Sequence[Mapping[str, Any]], items: Mapping[str, int], records: Sequence[RecordView]
) -> list[dict[str, Any]]:
    """Manifest blocks that are not records of the thread (instructions, skills, ...)."""
    ids = {r.record_id for r in records}
    out = []
    for p in manifest:
        if set(p.get("source_ids") or ()) & ids:
            continue  # a record of the thread: listed with it
        kind = str(p.get("kind"))
        tokens = items.get(kind, items.get(f"{kind}s"))
        out.append(
            _block(str(p.get("block_id")), str(p.get("role")), kind, tokens)
            | {"retention": "required", "reason": "protected_block"}
        )
    return out


def budget_bar(budget: Mapping[str, Any]) -> dict[str, Any]:
    """Budget items as shares of the InputBudget (percent, for a stacked bar)."""
    total = int(budget.get("input_budget") or 0)
    items = {str(k): int(v) for k, v in (budget.get("items") or {}).items() if int(v) > 0}
    denominator = max(total, sum(items.values()), 1)
    segments = [
        {"item": k, "tokens": v, "percent": round(100 * v / denominator, 2)}
        for k, v in sorted(items.items(), key=lambda kv: -kv[1])
    ]
    used = sum(items.values())
    return {
        "input_budget": total,
        "estimated_input": int(budget.get("final_estimated_input") or used),
        "segments": segments,
        "free": max(0, total - used),
        "free_percent": round(100 * max(0, total - used) / denominator, 2),
    }
