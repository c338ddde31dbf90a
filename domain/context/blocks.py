"""How blocks are labelled and the texts in front of a thread. Pure.

``RETENTION`` and ``KEPT_BECAUSE`` name, per budget category, how a block may be treated
(R10.1) and why it is in the context (R18); the tool schemas and the skills catalog are
rendered as stable text because they count against the budget too. ``RETENTION`` is the
label a rendered block starts with (the platform defaults, schemas/policy_defaults.py);
the assembler relabels and treats each block by the call's release's ``retention_rules``
(domain/window/retention.py).
"""

from __future__ import annotations

import json
from typing import Any

# Records an author wrote to be kept (issue 36): shown in the thread as a short state note.
AUTHORED_KINDS = frozenset({"decision_recorded", "question_opened", "question_closed"})


def authored_note(kind: str, text: str, payload: dict[str, Any]) -> str:
    """A decision, an open question (with its key, so that a model can close it) or a
    question's closing, as the thread shows it."""
    if kind == "decision_recorded":
        why = f" (reason: {payload['reason']})" if payload.get("reason") else ""
        return f"[state: decision recorded] {text}{why}"
    if kind == "question_opened":
        return f"[state: open question, key {payload.get('question_key')}] {text}"
    answer = f": {payload['answer']}" if payload.get("answer") else ""
    return f"[state: question {payload.get('question_key')} closed{answer}]"


RETENTION = {
    "task": "required",
    "state": "active",
    "summary": "active",
    "history": "compressible",
    "interactions": "compressible",
    "tool_results": "compressible",
    "material": "optional",
}


KEPT_BECAUSE = {
    "task": "current_task",
    "state": "state_of_record",
    "summary": "history_summary",
    "history": "inherited_history_not_yet_summarized",
    "interactions": "this_thread",
    "tool_results": "this_thread",
    "material": "parent_transfer",
}


def block_id(msg: dict[str, Any], first_record_id: str | None) -> str:
    """A message's stable id: its summary, its first source record, or "state"."""
    if msg.get("block") == "summary":
        return f"summary:{msg.get('summary_id')}"
    if first_record_id is None:
        return "state"
    return f"rec:{first_record_id}"


def tool_schema_text(tool_catalog: list[dict[str, Any]]) -> str:
    """Stable text of the tool schemas: they count against the budget too (LangChain #34664)."""
    return json.dumps(tool_catalog, sort_keys=True, separators=(",", ":"))


def skills_catalog_text(skills: list[dict[str, Any]]) -> str:
    """R12.1: name, description, version and load entry only — never the body."""
    lines = [
        f"- {s['name']} (v{s.get('version', '?')}): {s.get('description', '')}"
        f" — load with {s.get('load_entry', 'load_skill')}"
        for s in skills
    ]
    return "Available skills:\n" + "\n".join(lines) if lines else ""
