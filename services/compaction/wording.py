"""What the compaction service says to a summarizer model (R11.3), whichever client asks
(``domain.summarizer.wording.Wording``, wired by ``services.compaction.bootstrap``): the
system prompt and its answer schema (``prompt.md``), the segment as the user message, and
a forked call's final instruction."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import JsonValue

from domain.compaction.drafts import SummaryRequest

PROMPT_FILE = Path(__file__).with_name("prompt.md")


def load_prompt(path: Path = PROMPT_FILE) -> tuple[str, dict[str, JsonValue]]:
    """The system prompt (the whole file, its JSON schema included, so that a server
    without structured output still sees it) and the schema from its ``json`` block."""
    text = path.read_text("utf-8").strip()
    block = re.search(r"```json\n(.*?)```", text, re.S)
    if block is None:
        raise RuntimeError(f"{path} holds no ```json schema block")
    return text, json.loads(block.group(1))


SYSTEM_PROMPT, ANSWER_SCHEMA = load_prompt()


def _plan_lines(req: SummaryRequest) -> list[str]:
    if not req.plan.items:
        return []
    return [  # State of record, shown beside the summary (R11.4, R11.5)
        f"Current plan (v{req.plan.version}), shown to the agent on its own: never state"
        " an item's status otherwise; report an earlier plan only as the past"
        ' ("earlier: ...", "was").',
        *(f"- [{i.status}] {i.text} (id {i.item_id})" for i in req.plan.items),
        "",
    ]


def render_segment(req: SummaryRequest) -> str:
    """The user message: one ``[record_id] role/kind: text`` line per record; a record
    that made tool calls shows them with their arguments (``→ calls: name {json}``)."""
    lines: list[str] = []
    if req.previous_summary_text:
        lines += ["Previous summary (context only):", req.previous_summary_text, ""]
    lines += _plan_lines(req)
    lines.append("Segment to summarize:")
    for item in req.segment:
        tool = ""
        if item.tool_name or item.tool_status:
            tool = f"({', '.join(x for x in (item.tool_name, item.tool_status) if x)}) "
        text = item.text.replace("\n", "\\n")  # one record per line, ids stay unambiguous
        calls = "; ".join(
            f"{name} {args}".replace("\n", "\\n")
            for name, args in item.arguments
            if args != item.text  # a tool_call record whose text is its arguments
        )
        if calls:  # not in square brackets: those hold record ids only
            text = f"{text} → calls: {calls}" if text else f"→ calls: {calls}"
        lines.append(f"[{item.record_id}] {item.role}/{item.kind}: {tool}{text}")
    return "\n".join(lines)


INDEX_WORDS = 12  # the first words of a record in a forked call's index
FORK_NOTE = (
    "The conversation above is yours. Do not continue it and call no tool: summarize"
    " only the records of the segment below, as the instructions above describe. Each"
    " line of the segment indexes one record of the conversation above, in its order:"
    " its id in square brackets and its first words. Read the record itself above and"
    " cite these ids. A summary shown above is context only."
)


def fork_instruction(req: SummaryRequest) -> str:
    """A forked call's final message: the prompt, the plan, then one
    ``[record_id] role/kind: first words`` line per record of the segment."""
    lines = [SYSTEM_PROMPT, "", FORK_NOTE, "", *_plan_lines(req), "Segment to summarize:"]
    for item in req.segment:
        words = item.text.split() or [n for n, _args in item.arguments] or [item.tool_name or ""]
        more = " …" if len(words) > INDEX_WORDS else ""
        lines.append(
            f"[{item.record_id}] {item.role}/{item.kind}: {' '.join(words[:INDEX_WORDS])}{more}"
        )
    return "\n".join(lines)
