"""The plan tool (R4.4): the function schema a release may offer the model so it
keeps its plan as state of record, in the spirit of Codex's ``update_plan`` and
LangChain's ``write_todos``, and the parsing of its arguments into plan items.

The runtime executes a call of it by publishing ``ContextClient.update_plan`` with the
call's id as the event key (a retried call is no second version) and answers the call
with a short result; the plan then renders as its own block in every action context.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from schemas.contracts import PlanItem, PlanPayload, PlanStatus
from schemas.errors import InvalidEvent, InvalidRequest
from schemas.payload_rules import validate_plan

PLAN_TOOL_NAME = "update_plan"
STATUSES = [str(s) for s in PlanStatus]

PLAN_TOOL: dict[str, Any] = {
    "name": PLAN_TOOL_NAME,
    "description": (
        "Replace your current plan with this one: every step in order, each with a stable"
        " id and its status. Send the whole plan each time, after finishing, starting,"
        " blocking on or dropping a step. The current plan is shown to you in every call."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "explanation": {"type": "string", "description": "Why the plan changed."},
            "plan": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "step": {"type": "string"},
                        "status": {"type": "string", "enum": STATUSES},
                        "note": {"type": "string"},
                    },
                    "required": ["step", "status"],
                },
            },
        },
        "required": ["plan"],
    },
}

PlanItemLike = PlanItem | Mapping[str, Any]

# LangChain's todo statuses (TodoListMiddleware) and Codex's, mapped to ours.
_ALIASES = {"completed": "done", "complete": "done", "todo": "pending"}


def plan_items(items: Sequence[PlanItemLike]) -> tuple[PlanItem, ...]:
    """Plan items from ``PlanItem``s or mappings (``id``/``item_id``, ``step``/``text``/
    ``content``, ``status``, ``note``), checked as the processor checks a plan (so a tool
    can tell the model at once, not after a dead letter). An item without an id gets
    ``step-N`` (N its position; a suffix if another item already has that id)."""
    out: list[PlanItem] = []
    given = {str(r.get("item_id") or r.get("id")) for r in items if isinstance(r, Mapping)}
    given |= {r.item_id for r in items if isinstance(r, PlanItem)}
    for n, raw in enumerate(items, 1):
        if isinstance(raw, PlanItem):
            out.append(raw)
            continue
        if not isinstance(raw, Mapping):
            raise InvalidRequest(f"plan item {n} is not an object", field="plan")
        text = raw.get("text") or raw.get("step") or raw.get("content") or ""
        status = str(raw.get("status") or "pending").lower().replace("-", "_").replace(" ", "_")
        status = _ALIASES.get(status, status)
        item_id = str(raw.get("item_id") or raw.get("id") or _free(f"step-{n}", given))
        note = raw.get("note")
        out.append(PlanItem(item_id, str(text), status, None if note is None else str(note)))
    try:
        validate_plan(PlanPayload(tuple(out)))
    except InvalidEvent as exc:
        raise InvalidRequest(str(exc), field="plan", reason=exc.reason_code) from exc
    return tuple(out)


def _free(wanted: str, taken: set[str]) -> str:
    out, k = wanted, 1
    while out in taken:
        k += 1
        out = f"{wanted}-{k}"
    taken.add(out)
    return out


def plan_from_tool_arguments(arguments_json: str) -> tuple[tuple[PlanItem, ...], str | None]:
    """The plan and explanation of a ``update_plan`` call's JSON arguments."""
    try:
        args = json.loads(arguments_json)
    except json.JSONDecodeError as exc:
        raise InvalidRequest("update_plan arguments are not JSON", field="arguments") from exc
    if not isinstance(args, dict) or not isinstance(args.get("plan"), list):
        raise InvalidRequest("update_plan needs a plan: a list of steps", field="plan")
    explanation = args.get("explanation")
    return plan_items(args["plan"]), None if explanation is None else str(explanation)
