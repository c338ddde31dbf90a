"""Retention rules take effect (R10.1, R10.2, R17). Pure.

The release's ``context_policy.retention_rules`` give each block category a class; the
assembler applies them to the thread's blocks and the retrieved material of every call:

- ``required``: never dropped, never summarized; counted in ``budget.required`` (alone
  over the budget it is a precise ``required_over_budget`` error) and entered in the
  protected block manifest, so no hook may remove, alter or downgrade it (R10.5).
- ``active``: kept verbatim for its lifecycle: never dropped for the budget; a conversation
  block is never covered by a compaction (the worker pins it, ``retained_record_ids``),
  a state note or the summary keeps the lifecycle the platform gives it.
- ``compressible``: kept verbatim until a compaction summarizes it with provenance.
- ``on_demand``: kept like ``compressible`` (a large result is a view already, R10.3).
- ``optional``: over the budget it goes before anything is compacted (R10.2 step 3):
  retrieved material last supplied first, then the thread's optional blocks oldest first.
  A tool group is one unit (R5.1): it goes whole when its results are optional and none
  of its blocks is required or active.

The task category is ``required`` whatever the rules say (LOCKED_RETENTION).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from domain.policy.context_policy import ContextPolicy
from domain.policy.sections import RetentionRules
from domain.window.budget import Calibration
from domain.window.record_view import Message, RecordView

_TALK = frozenset({"history", "interactions", "tool_results", "material"})
_DEFAULTS = asdict(ContextPolicy().retention_rules)  # schemas/policy_defaults.py
# The categories a rule may make required beyond the task (counted and protected already).
_BY_RULE = frozenset(_DEFAULTS) - {"task"}


def classes(rules: RetentionRules | None) -> dict[str, str]:
    """Category → retention class; ``None``: the platform defaults."""
    return asdict(rules) if rules is not None else dict(_DEFAULTS)


def _any_required(table: dict[str, str]) -> bool:
    return any(table[c] == "required" for c in _BY_RULE)


def by_rule(messages: Sequence[Message], table: dict[str, str]) -> list[Message]:
    """The blocks a rule made required: protected like the task (R10.5)."""
    if not _any_required(table):
        return []  # the common case: one look at the rules, not at every block
    return [m for m in messages if m.get("retention") == "required" and m["category"] in _BY_RULE]


def _factor(calibration: Calibration | None) -> float:
    return calibration.factor if calibration is not None and calibration.factor > 1.0 else 1.0


def drop_material(
    mat_msgs: list[Message],
    items: dict[str, int],
    decisions: list[dict[str, Any]],
    budget: int,
    calibration: Calibration | None,
) -> None:
    """R10.2 step 3: optional material goes first when over budget, last supplied first —
    judged by the calibrated estimate, the one ``enforce`` checks (R6.4)."""
    factor = _factor(calibration)
    total = sum(items.values()) + sum(m["tokens"] for m in mat_msgs)
    while mat_msgs and math.ceil(total * factor) > budget:
        gone = mat_msgs.pop()
        total -= gone["tokens"]
        decisions.append(
            {"block_id": gone["block_id"], "decision": "dropped", "reason": "optional_over_budget"}
        )


def relabel(messages: Sequence[Message], table: dict[str, str]) -> list[Message]:
    """The thread's blocks with their category's class. A block whose class changes is
    copied: the thread's messages are shared with the cached view."""
    if table == _DEFAULTS:
        return list(messages)  # rendered with the defaults (blocks.RETENTION) already
    out: list[Message] = []
    for m in messages:
        want = table.get(str(m.get("category")))
        out.append(m if want is None or m.get("retention") == want else m | {"retention": want})
    return out


def reduce(
    body: list[Message],
    mat_msgs: list[Message],
    items: dict[str, int],
    decisions: list[dict[str, Any]],
    overhead: int,
    budget: int,
    calibration: Calibration | None,
    material_class: str,
) -> list[Message]:
    """R10.2 step 3 over the budget: the retrieved material if optional, last supplied
    first, then the thread's optional blocks. Returns the thread's blocks that stay."""
    if material_class == "optional":
        drop_material(mat_msgs, items, decisions, budget, calibration)
    if mat_msgs:
        items["material"] = items.get("material", 0) + sum(m["tokens"] - overhead for m in mat_msgs)
        items["envelope"] += overhead * len(mat_msgs)
    return drop_optional(body, items, decisions, budget, calibration, overhead)


def units(messages: Sequence[Message]) -> list[list[int]]:
    """Indices grouped as the provider must see them: an assistant message with its tool
    calls and their results is one unit (R5.1); every other block is its own."""
    out: list[list[int]] = []
    open_calls: dict[str, list[int]] = {}
    for i, m in enumerate(messages):
        call_id = m.get("tool_call_id")
        if m.get("role") == "tool" and call_id in open_calls:
            open_calls[str(call_id)].append(i)
            continue
        unit = [i]
        out.append(unit)
        for c in m.get("tool_calls") or ():
            open_calls[str(c.get("id"))] = unit
    return out


def drop_optional(
    messages: list[Message],
    items: dict[str, int],
    decisions: list[dict[str, Any]],
    budget: int,
    calibration: Calibration | None,
    overhead: int,
) -> list[Message]:
    """R10.2 step 3 for the thread: while the calibrated estimate is over the budget, drop
    the oldest unit whose blocks are all optional. Returns the blocks that stay."""
    factor = _factor(calibration)
    total = sum(items.values())
    if math.ceil(total * factor) <= budget:
        return messages
    gone: set[int] = set()
    for unit in units(messages):
        if math.ceil(total * factor) <= budget:
            break
        if not _droppable([messages[i] for i in unit]):
            continue
        for i in unit:
            m = messages[i]
            gone.add(i)
            total -= m["tokens"]
            cat = str(m["category"])
            items[cat] = items.get(cat, 0) - (m["tokens"] - overhead)
            items["envelope"] = items.get("envelope", 0) - overhead
            decisions.append(
                {
                    "block_id": m["block_id"],
                    "decision": "dropped",
                    "reason": "optional_over_budget",
                    "category": cat,
                    "record_ids": list(m.get("record_ids") or ()),
                }
            )
    return [m for i, m in enumerate(messages) if i not in gone]


def _droppable(unit: Sequence[Message]) -> bool:
    """A block goes when it is optional. A tool group goes whole (R5.1): when its results
    are optional and none of its blocks is required or active — a call without its result
    is no valid request, and a result is what makes a group large."""
    decide = [m for m in unit if m.get("role") == "tool"] or list(unit)
    if any(m.get("retention") in ("required", "active") for m in unit):
        return False
    return all(m.get("retention") == "optional" for m in decide)


def required_tokens(
    messages: Sequence[Message], skip: frozenset[int], table: dict[str, str]
) -> int:
    """Tokens of the blocks a rule made required (the task is counted already)."""
    if not _any_required(table):
        return 0
    return sum(
        m["tokens"]
        for i, m in enumerate(messages)
        if i not in skip and m.get("retention") == "required" and m["category"] in _BY_RULE
    )


def record_category(rec: RecordView, run_id: str) -> str:
    """The category the renderer gives a record's block (domain/context/rendering.py): a run's
    own records by kind, an earlier run's as history."""
    kind = rec.kind
    if kind in ("resource_activation", "run_cancelled"):
        return "state"
    if kind == "child_result":
        return "material"
    if rec.run_id != run_id:
        return "history"
    if kind in ("user_input", "supplement"):
        return "task"
    return "tool_results" if kind == "tool_outcome" else "interactions"


def retained_record_ids(
    records: Sequence[RecordView], run_id: str, rules: RetentionRules
) -> frozenset[str]:
    """R10.1: the records no compaction may cover — those of a ``required`` category, and
    of a conversation category (history, interactions, tool_results, material) the release
    makes ``active``. State notes and the summary have a lifecycle of their own: ``active``
    there (the default) leaves them to it — a state note goes with the history it belongs
    to, a summary is replaced by the next one."""
    table = classes(rules)
    keep = {c for c, k in table.items() if k == "required" or (k == "active" and c in _TALK)}
    if keep <= {"task"}:
        return frozenset()  # the task is pinned by the worker already (current_task_ids)
    return frozenset(r.record_id for r in records if record_category(r, run_id) in keep)
