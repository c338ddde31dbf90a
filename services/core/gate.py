"""The model gateway's final check (R9.8, R10.5, R14). Pure.

After ``model.chat.before`` hooks ran, the gateway checks the final messages against the
prepared context's protected block manifest and recomputes the estimate with the same
BudgetPolicy:
- a required block removed, altered or downgraded ⇒ ``protected_block_violation``;
- over the input budget (the hard limit) ⇒ ``context_budget_exceeded``: nothing is sent;
- newly at or over the soft threshold (the policy's context ratio) ⇒
  ``context_reprepare_required`` — at most once: a context prepared for a re-prepare is
  never asked again, it is sent if it fits and refused if it does not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from schemas.errors import ContextBudgetExceeded, ContextReprepareRequired, ProtectedBlockViolation
from services.core.context import ProtectedBlock, sha256

Message = dict[str, Any]


@dataclass(frozen=True)
class HookEffect:
    messages: list[Message]
    added_tokens: int
    removed_tokens: int
    added_block_ids: tuple[str, ...]


def apply_hook(
    hook: str,
    before: Sequence[Message],
    after: Sequence[Message],
    manifest: Sequence[ProtectedBlock],
    count: Callable[[str], int],
    overhead: int,
) -> HookEffect:
    """Check one hook's output and account for what it changed. New messages are tagged
    as temporary hook material with the hook's version as their source (R14)."""
    protected = {p.block_id: p for p in manifest}
    old = {str(m.get("block_id")): m for m in before}
    out: list[Message] = []
    seen: set[str] = set()
    added = removed = 0
    new_ids: list[str] = []
    for i, m in enumerate(after):
        bid = m.get("block_id")
        prev = old.get(str(bid)) if bid is not None else None
        if prev is None or str(bid) in seen:
            if bid is not None and str(bid) in protected:
                raise ProtectedBlockViolation(
                    f"hook {hook} duplicated protected block {bid}",
                    hook=hook,
                    block_id=bid,
                    violation="duplicated",
                )
            tagged = {
                "role": m.get("role", "user"),
                "content": str(m.get("content") or ""),
                "block": "hook",
                "block_id": f"{hook}:{i}",
                "category": "hook",
                "retention": "optional",
                "decision": "added_by_hook",
                "source": hook,
                "record_ids": [],
            }
            if tagged["role"] not in ("user", "assistant", "system"):
                tagged["role"] = "user"
            t = count(tagged["content"]) + overhead
            tagged["tokens"] = t
            added += t
            new_ids.append(tagged["block_id"])
            out.append(tagged)
            continue
        seen.add(str(bid))
        if m is prev or (
            m.get("content") == prev.get("content") and m.get("role") == prev.get("role")
        ):
            out.append(prev)
            continue
        p = protected.get(str(bid))
        if p is not None:
            _violation(hook, p, m)
        t = count(str(m.get("content") or "")) + overhead
        role = m.get("role") if m.get("role") in ("user", "assistant", "system") else prev["role"]
        changed = dict(prev) | {
            "role": role,
            "content": m.get("content"),
            "decision": "adjusted_by_hook",
            "source": hook,
            "tokens": t,
        }
        added += t
        removed += int(prev.get("tokens") or 0)
        out.append(changed)
    for bid, m in old.items():
        if bid not in seen:
            if bid in protected:
                raise ProtectedBlockViolation(
                    f"hook {hook} removed protected block {bid}",
                    hook=hook,
                    block_id=bid,
                    violation="removed",
                )
            removed += int(m.get("tokens") or 0)
    return HookEffect(out, added, removed, tuple(new_ids))


def _violation(hook: str, p: ProtectedBlock, m: Message) -> None:
    if m.get("role") != p.role:
        what = "downgraded"
    elif sha256(str(m.get("content") or "")) != p.sha256:
        what = "altered"
    elif tuple(m.get("record_ids") or ()) != p.source_ids:
        what = "source_changed"
    else:
        return
    raise ProtectedBlockViolation(
        f"hook {hook} {what} protected block {p.block_id}",
        hook=hook,
        block_id=p.block_id,
        violation=what,
        kind=p.kind,
        authority=p.authority,
    )


def check_manifest(messages: Sequence[Message], manifest: Sequence[ProtectedBlock]) -> None:
    """Every protected block present, unchanged, in its role, with its sources."""
    by_id = {str(m.get("block_id")): m for m in messages}
    for p in manifest:
        m = by_id.get(p.block_id)
        if m is None:
            raise ProtectedBlockViolation(
                f"protected block {p.block_id} is missing", block_id=p.block_id, violation="removed"
            )
        _violation("final_check", p, m)


@dataclass(frozen=True)
class GateDecision:
    estimated_input: int
    input_budget: int
    soft_limit: int
    hook_tokens: int


def gate(
    *,
    estimated_before: int,
    added: int,
    removed: int,
    input_budget: int,
    soft_ratio: float | None,
    reprepared: bool,
    details: dict[str, Any],
) -> GateDecision:
    """Send, re-prepare (once) or refuse. ``soft_ratio`` is the policy's context ratio;
    None means no soft threshold (token trigger off), only the hard limit."""
    after = estimated_before - removed + added
    soft = int(input_budget * soft_ratio) if soft_ratio is not None else input_budget + 1
    info = {
        "estimated_before_hooks": estimated_before,
        "estimated_input": after,
        "input_budget": input_budget,
        "soft_limit": soft,
        "hook_tokens": added - removed,
    } | details
    if after > input_budget:
        raise ContextBudgetExceeded(
            "model before-hooks pushed the input over the hard limit; nothing was sent",
            reason="hook_over_hard_limit",
            **info,
        )
    if after >= soft > estimated_before and not reprepared:
        raise ContextReprepareRequired(
            "model before-hooks crossed the soft threshold; prepare again once with"
            " reserve_tokens set to hook_tokens",
            reason="hook_over_soft_threshold",
            **info,
        )
    return GateDecision(after, input_budget, soft, added - removed)
