"""The execution frontier's blocks in an action context (R4.4, R11.5). Pure."""

from __future__ import annotations

from typing import Any

from domain.authority import DERIVED_ROLE
from domain.frontier import Frontier, constraints_text, plan_text
from domain.window.record_view import CountFn, Message


def frontier_messages(frontier: Frontier, count: CountFn, overhead: int) -> list[Message]:
    """R4.4, R11.5: the constraints in force and the current plan, verbatim,
    each a required block of its own with its version and the records that set it. A
    thread with neither gets no block (and pays for none)."""
    out: list[Message] = []
    if frontier.constraints:
        text = constraints_text(frontier.constraints, frontier.constraints_version)
        out.append(
            _pinned(
                "constraints",
                f"constraints:v{frontier.constraints_version}",
                text,
                "user_constraints_in_force",
                [c.record_id for c in frontier.constraints],
                count(text) + overhead,
                version=frontier.constraints_version,
                constraint_ids=[c.constraint_id for c in frontier.constraints],
            )
        )
    plan = frontier.plan
    if plan.version:
        text = plan_text(plan)
        out.append(
            _pinned(
                "plan",
                f"plan:v{plan.version}",
                text,
                "current_plan",
                [plan.record_id] if plan.record_id else [],
                count(text) + overhead,
                version=plan.version,
            )
        )
    return out


def _pinned(
    block: str, bid: str, text: str, reason: str, record_ids: list[str], tokens: int, **kw: Any
) -> Message:
    return {
        "role": DERIVED_ROLE,
        "content": text,
        "block": block,
        "block_id": bid,
        "category": "task",
        "retention": "required",
        "decision": "kept",
        "reason": reason,
        "record_ids": record_ids,
        "tokens": tokens,
    } | kw
