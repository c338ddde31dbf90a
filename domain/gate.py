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

from domain.context.assemble import sha256
from schemas.answers.prepared import ProtectedBlock
from schemas.errors import ContextBudgetExceeded, ContextReprepareRequired, ProtectedBlockViolation

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
            tagged = _hook_material(hook, i, m, count, overhead)
            added += tagged["tokens"]
            new_ids.append(tagged["block_id"])
            out.append(tagged)
            continue
        seen.add(str(bid))
        kept = _checked_change(hook, prev, m, protected.get(str(bid)), count)
        if kept is not prev:
            added += kept["tokens"]
            removed += int(prev.get("tokens") or 0)
        out.append(kept)
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


def _hook_material(
    hook: str, index: int, m: Message, count: Callable[[str], int], overhead: int
) -> Message:
    """A message the hook added: temporary, optional, sourced to the hook (R14)."""
    tagged: Message = {
        "role": m.get("role", "user"),
        "content": str(m.get("content") or ""),
        "block": "hook",
        "block_id": f"{hook}:{index}",
        "category": "hook",
        "retention": "optional",
        "decision": "added_by_hook",
        "source": hook,
        "record_ids": [],
    }
    if tagged["role"] not in ("user", "assistant", "system"):
        tagged["role"] = "user"
    tagged["tokens"] = count(tagged["content"]) + overhead
    return tagged


def _checked_change(
    hook: str,
    prev: Message,
    m: Message,
    protected: ProtectedBlock | None,
    count: Callable[[str], int],
) -> Message:
    """The hook's version of an existing block: ``prev`` itself when unchanged, else the
    block with the new content re-counted. Raises on a change no hook may make."""
    if protected is not None:
        _violation(hook, protected, m)
    # Tool protocol fields and roles are never a hook's to change: a changed call id,
    # name or argument, or a role moved, breaks a group or promotes material (R5, R12.4).
    for f in ("role", "tool_calls", "tool_call_id", "name"):
        if m.get(f) != prev.get(f):
            raise ProtectedBlockViolation(
                f"hook {hook} changed {f} of block {m.get('block_id')}",
                hook=hook,
                block_id=m.get("block_id"),
                violation="protocol_field_changed",
                field=f,
            )
    if m.get("content") == prev.get("content"):
        return prev
    # Re-count the content only: the rest of the stored count (call names and JSON
    # arguments, the envelope) is still sent.
    old_text = str(prev.get("content") or "")
    new_text = str(m.get("content") or "")
    tokens = int(prev.get("tokens") or 0) - count(old_text) + count(new_text)
    return dict(prev) | {
        "content": new_text,
        "decision": "adjusted_by_hook",
        "source": hook,
        "tokens": tokens,
    }


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


def check_tool_groups(messages: Sequence[Message]) -> None:
    """R5.1 at the last moment: every call answered right after its assistant message,
    no result without its call — what a provider would refuse with a 400."""
    pending: list[str] = []
    for m in messages:
        if m.get("role") == "tool":
            cid = m.get("tool_call_id")
            if cid not in pending:
                raise ProtectedBlockViolation(
                    f"tool result {cid} has no call right before it",
                    violation="tool_group_broken",
                    call_id=cid,
                )
            pending.remove(cid)
            continue
        if pending:
            raise ProtectedBlockViolation(
                f"tool calls {pending} are not followed by their results",
                violation="tool_group_broken",
                call_ids=list(pending),
            )
        pending = [str(c["id"]) for c in m.get("tool_calls") or ()]
    if pending:
        raise ProtectedBlockViolation(
            f"tool calls {pending} have no results",
            violation="tool_group_broken",
            call_ids=pending,
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
