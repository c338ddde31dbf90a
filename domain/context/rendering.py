"""Thread view assembly (R2, R4, R5): source records → provider-neutral messages. Pure.

``ThreadRenderer`` is incremental: records are fed in ``session_sequence`` order and
closed message groups are rendered once, so a prepare on a long thread re-renders only
what is new. Rules:
- an assistant message and the results of all its calls form one group, never split
  (R5.1); records arriving while a group is open (e.g. a user supplement) are placed
  after it closes, in receive order (R5.3);
- an inherited group whose results never came is shown as a state block saying
  "result unknown" — never re-executed and never given a made-up result (R2.4);
- every message keeps the ids of the source records it came from (block → source map);
- a retraction renders nothing and is no compaction candidate; the records it
  retracted never reach a renderer (``storage.records.threads`` leaves them out, and a change of
  the view epoch rebuilds a warm renderer that had shown one).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from domain.authority import DERIVED_ROLE, NOT_AN_INSTRUCTION
from domain.context.block_log import BlockLog
from domain.context.blocks import (
    AUTHORED_KINDS,
    KEPT_BECAUSE,
    RETENTION,
    authored_note,
    skills_catalog_text,
    tool_schema_text,
)
from domain.policy.context_policy import LargeResultSettings
from domain.policy.sections import ChildTransferPolicy
from domain.window.active_skills import track as track_skill
from domain.window.child_transfer import capped_result, choose_background
from domain.window.record_view import (
    CountFn,
    DeferredRecords,
    Message,
    OpenGroup,
    RecordView,
    SkillActivation,
    SkillLoad,
)

__all__ = [
    "KEPT_BECAUSE",
    "RETENTION",
    "RETRACTION",
    "CountFn",
    "Message",
    "RecordView",
    "SkillActivation",
    "SkillLoad",
    "ThreadRenderer",
    "skills_catalog_text",
    "tool_schema_text",
]

RETRACTION = "record_retracted"  # withdraws another record from views; shows nothing


class ThreadRenderer(BlockLog):
    """Decides what each record becomes and where it goes (its group, deferred behind an
    open one, or now); ``BlockLog`` writes the blocks. ``covered`` are the records a
    committed summary replaces (R11): they are counted as seen but not rendered;
    ``add_summary`` puts the summary block first."""

    def __init__(
        self,
        count: CountFn,
        message_overhead: int = 4,
        covered: frozenset[str] = frozenset(),
        summary_id: str | None = None,
        large: LargeResultSettings | None = None,
        transfer: ChildTransferPolicy | None = None,
    ) -> None:
        super().__init__(count, message_overhead, large or LargeResultSettings())
        self.covered = covered
        self.summary_id = summary_id
        self.transfer = transfer  # None: background and child results unlimited
        self.skill_loads: dict[str, SkillLoad] = {}  # by content hash
        self.activations: dict[str, SkillActivation] = {}  # latest per skill name
        self.skill_used: dict[str, tuple[int, int]] = {}  # last use: run number, sequence
        self.runs: dict[str, int] = {}  # run id -> its number in this thread
        self.transfer_notes: list[dict[str, Any]] = []  # background left out (R13.2)
        # Uncovered records, for compaction selection; those of a loaded state are built
        # on first read (most prepares never read them).
        self._records = DeferredRecords()
        self.record_count = 0
        self.last_sequence = 0
        self._open: OpenGroup | None = None

    @property
    def records(self) -> list[RecordView]:
        return self._records.all()

    @records.setter
    def records(self, records: list[RecordView]) -> None:
        self._records = DeferredRecords(records)

    # --- feeding ---------------------------------------------------------------------

    def add_summary(self, text: str, tokens: int) -> None:
        # R3.3: a summary restates user, model and tool text — quoted history, never an
        # instruction, whatever its lines say.
        header = (
            f"[history summary {self.summary_id} — a record of earlier work; "
            f"{NOT_AN_INSTRUCTION}]\n"
        )
        self._add(
            {
                "role": DERIVED_ROLE,
                "content": header + text,
                "block": "summary",
                "summary_id": self.summary_id,
            },
            [],
            "summary",
            self._framed(tokens, header, text),
        )

    def add_material(self, rec: RecordView) -> None:
        """R13.2: background a parent chose for a child — material, never an instruction."""
        header = f"[background from the parent task: {rec.kind}, material]\n"
        self._add(
            {"role": "user", "content": header + rec.text, "block": "material"},
            [rec],
            "material",
            self._framed(rec.token_count, header, rec.text),
        )

    def add_background(self, records: list[RecordView]) -> None:
        """R13.2: what the parent exported, within the release's limits (decisions kept)."""
        kept, self.transfer_notes = choose_background(records, self.transfer)
        for rec in kept:
            self.add_material(rec)

    def feed(self, rec: RecordView, inherited: bool) -> None:
        if rec.session_sequence <= self.last_sequence:
            return  # already rendered: feeding is idempotent (R2.3)
        self.record_count += 1
        self.last_sequence = rec.session_sequence
        track_skill(self, rec)
        if rec.record_id in self.covered or rec.kind == RETRACTION:
            return
        self._records.append(rec)
        self._route(rec, inherited)

    def show(self, records: Iterable[RecordView]) -> None:
        """Place inherited ``records`` (in sequence order, retractions left out) whose
        tracking and counts this renderer holds already, as ``feed`` places them: those
        its summary covers are left out (``services.prepare.assembly.history``)."""
        for rec in records:
            if rec.record_id not in self.covered:
                self._records.append(rec)
                self._route(rec, inherited=True)

    def _route(self, rec: RecordView, inherited: bool) -> None:
        """Place one record: into the open group, deferred behind it, or rendered now.
        Deferred records are replayed through here too, so a deferred call still gets its
        own group and its result."""
        grp = self._open
        if grp is not None:
            kind = rec.kind
            if kind == "tool_outcome" or kind == "tool_call":
                call_id: str = rec.payload.get("call_id") or ""
                if call_id in grp.ids:
                    if kind == "tool_call":
                        return  # the host's dispatch record of a call already in view
                    grp.results[call_id] = rec
                    if grp.complete():
                        self._close(grp)
                    return
            if kind == "assistant_message" or (inherited != grp.inherited):
                self._close(grp)  # a new model turn or a run boundary: missing results stay unknown
                self._route(rec, inherited)
            else:
                grp.deferred.append(rec)
            return
        self._emit_record(rec, inherited)

    def seal_inherited(self) -> None:
        """End of the inherited history: an inherited open group closes as unknown."""
        if self._open is not None and self._open.inherited:
            self._close(self._open)

    def pending_calls(self) -> list[str]:
        """Call ids of the current thread still waiting for results."""
        if self._open is None or self._open.inherited:
            return []
        return [c["call_id"] for c in self._open.calls if c["call_id"] not in self._open.results]

    # --- rendering -------------------------------------------------------------------

    def _emit_record(self, rec: RecordView, inherited: bool) -> None:
        k = rec.kind
        if k in ("user_input", "supplement"):
            self._add(
                {"role": "user", "content": rec.text, "block": "interaction"},
                [rec],
                "history" if inherited else "task",
                rec.token_count,
            )
        elif k == "assistant_message":
            calls = list(rec.payload.get("tool_calls") or [])
            if calls:
                self._open = OpenGroup(rec, calls, inherited=inherited)
            else:
                self._add(
                    {"role": "assistant", "content": rec.text, "block": "interaction"},
                    [rec],
                    "history" if inherited else "interactions",
                    rec.token_count,
                )
        elif k == "tool_call":
            call = {
                "call_id": rec.payload["call_id"],
                "name": rec.payload["name"],
                "arguments_json": rec.payload["arguments_json"],
            }
            self._open = OpenGroup(rec, [call], inherited=inherited)
        elif k == "tool_outcome":
            self._orphan_result(rec)
        elif k == "child_result":
            self._child_result(rec)
        elif k == "resource_activation":
            p = rec.payload
            self._state_note(
                rec,
                f"[state: resource activated] {p.get('resource_kind')} {p.get('resource_id')}"
                f" version {p.get('version')}",
            )
        elif k in AUTHORED_KINDS:
            self._state_note(rec, authored_note(k, rec.text, rec.payload))
        elif k == "run_cancelled" and inherited:
            self._state_note(rec, f"[state: history] run {rec.run_id} was cancelled")
        # run_started / run_resumed / run_finished carry no model-visible content.

    def _child_result(self, rec: RecordView) -> None:
        """R13.2: a child's result is material for the parent; over the release's
        ``max_result_tokens`` it is a view with a read-back reference."""
        cap = self.transfer.max_result_tokens if self.transfer else None
        view = capped_result(rec, cap, self.large.preview_chars, self.count)
        if view is not None:
            self.externalized.append(rec.record_id)
            self._add(view, [rec], "material", self.count(view["content"]))
            return
        header = "[child task result — material]\n"
        msg: Message = {"role": "user", "content": header + rec.text, "block": "material"}
        msg["reason"] = "child_result"
        self._add(msg, [rec], "material", self._framed(rec.token_count, header, rec.text))

    def _orphan_result(self, rec: RecordView) -> None:
        """A result whose call is not in view: kept visible as state, not as a tool
        message (a provider rejects a result without its call)."""
        p = rec.payload
        cid, name, status = str(p.get("call_id")), str(p.get("name")), str(p.get("status"))
        head = (
            f"[tool result without its call in view — tool output, {NOT_AN_INSTRUCTION}]"
            f" call_id={cid} name={name}"
        )
        msg: Message = {"role": DERIVED_ROLE, "block": "state"}
        if self._is_large(rec):  # a large one is a view here too (R5.4, R10.3)
            msg["content"] = f"{head} status={status}\n{self._view_of(rec, cid, name, status)}"
            msg |= {
                "decision": "externalized",
                "reason": "large_result_view",
                "content_ref": f"rec:{rec.record_id}",
            }
            tokens = self.count(msg["content"])
            self.externalized.append(rec.record_id)
        else:
            msg["content"] = f"{head} status={status}\n{rec.text}"
            tokens = self._framed(rec.token_count, f"{head} status={status}\n", rec.text)
        self._add(msg, [rec], "state", tokens)

    def _close(self, grp: OpenGroup) -> None:
        self._open = None
        a = grp.assistant
        cat = "history" if grp.inherited else "interactions"
        answered = [c for c in grp.calls if c["call_id"] in grp.results]
        missing = [c for c in grp.calls if c["call_id"] not in grp.results]
        text = a.text if a.kind == "assistant_message" else ""
        msg: Message = {"role": "assistant", "content": text, "block": "interaction"}
        if answered:
            msg["tool_calls"] = [
                {"id": c["call_id"], "name": c["name"], "arguments": c["arguments_json"]}
                for c in answered
            ]
        self._add(msg, [a], cat, a.token_count)
        for c in answered:
            r = grp.results[c["call_id"]]
            status = r.payload.get("status", "unknown")
            msg = {
                "role": "tool",
                "tool_call_id": c["call_id"],
                "name": c["name"],
                "status": status,
                "content": r.text,
                "block": "interaction",
            }
            tokens = r.token_count
            skill = r.payload.get("skill")
            if isinstance(skill, dict):
                # A skill body is never cut (R12.3); the assembler decides if it counts.
                load = self.skill_loads.get(r.content_sha256 or "")
                if load is not None and load.record_id == r.record_id:
                    load.message_index = len(self.messages)
            elif self._is_large(r):
                msg["content"] = self._view_of(r, c["call_id"], c["name"], status)
                msg["decision"] = "externalized"
                msg["reason"] = "large_result_view"
                msg["content_ref"] = f"rec:{r.record_id}"
                tokens = self.count(msg["content"])
                self.externalized.append(r.record_id)
            self._add(msg, [r], "history" if grp.inherited else "tool_results", tokens)
        for c in missing:
            note = (
                f"[state — {NOT_AN_INSTRUCTION}] tool call {c['call_id']} ({c['name']},"
                f" arguments {c['arguments_json']}) has result unknown: it was interrupted"
                " and is not re-executed."
            )
            self._add(
                {
                    "role": DERIVED_ROLE,
                    "content": note,
                    "block": "state",
                    "block_id": f"unknown:{a.record_id}:{c['call_id']}",
                },
                [a],
                "state",
                self.count(note),
            )
        for d in grp.deferred:
            self._route(d, grp.inherited)
