"""What a thread renderer has written (R4.2, R6.2, R10.3, R15.4): the messages as blocks,
pure. ``BlockLog`` is the base of ``domain.context.rendering.ThreadRenderer``, which
decides what a record becomes and where it goes; here each message becomes a block — its
source records, category, tokens, retention, decision and reason — with credentials
redacted and the growth counted, the token counts kept by category, and a large tool
result shown as a view with a read-back reference."""

from __future__ import annotations

from typing import Any

from domain.authority import DERIVED_ROLE
from domain.context.blocks import KEPT_BECAUSE, RETENTION, block_id
from domain.context.redaction import redact
from domain.policy.context_policy import LargeResultSettings
from domain.window.record_view import CountFn, Message, RecordView


class BlockLog:
    """The messages written so far and their accounting."""

    def __init__(self, count: CountFn, message_overhead: int, large: LargeResultSettings) -> None:
        self.count = count
        self.overhead = message_overhead
        self.large = large
        self.messages: list[Message] = []
        self.tokens: dict[str, int] = {}
        self.message_counts: dict[str, int] = {}
        self.task_indices: list[int] = []  # messages of the current task: required (R10.1)
        self.protected_cache: list[Any] = []  # their manifest entries, filled by the assembler
        self.externalized: list[str] = []  # record ids shown as views (R10.3)

    def _state_note(self, rec: RecordView, note: str) -> None:
        self._add(
            {"role": DERIVED_ROLE, "content": note, "block": "state"},
            [rec],
            "state",
            self.count(note),
        )

    def _is_large(self, r: RecordView) -> bool:
        # Metadata only: the stored count and length decide, not the content (R10.3).
        return r.token_count > self.large.inline_max_tokens or (
            r.full_length > len(r.text)  # only a prefix was loaded: never inline
        )

    def _view_of(self, r: RecordView, call_id: str, name: str, status: str) -> str:
        """R5.4/R10.3: call id, real status, a truncation note, a real reference, the
        length, the readable range and how to read the rest."""
        shown = r.text[: self.large.preview_chars]
        total = r.full_length
        unit = "bytes" if r.content_length >= 0 else "characters"  # blob: bytes known
        return (
            f"[result truncated: call_id={call_id} name={name} status={status}; "
            f"{total} {unit}, {r.token_count} tokens; showing characters 0-{len(shown)}."
            f' Read the rest with read_content(ref="rec:{r.record_id}", offset={len(shown)},'
            f" limit=8000); readable range 0-{total} {unit}.]\n{shown}"
        )

    def _framed(self, tokens: int, header: str, text: str) -> int:
        """The stored count ``tokens`` of ``text`` plus what ``header``, shown before it,
        adds (R6.2): the model sees the header too.

        A header ending in a line break before a text starting with a visible character
        meets it at a boundary the tokenizer's pre-split keeps (no piece crosses a line
        break into a word), so the header's own count is what it adds: the text is not
        encoded again on each render. Otherwise both are counted whole."""
        if header.endswith("\n") and (not text or not text[0].isspace()):
            return tokens + self.count(header)
        return tokens + self.count(header + text) - self.count(text)

    def _add(self, msg: Message, sources: list[RecordView], category: str, tokens: int) -> None:
        # R15.4: credentials never enter context. A placeholder can be longer than the
        # secret it replaces ("pwd=x" → "pwd=[credential redacted]"): the growth is
        # counted, so the estimate never falls below what is sent (R6.2).
        original = msg.get("content") or ""
        content, redacted = redact(original)
        if redacted:
            msg["content"] = content
            msg["redactions"] = redacted
            tokens += max(0, self.count(content) - self.count(original))
        # the keys are set in this order (the stored state and the prepared context keep
        # it); a key the caller set keeps its place and value.
        msg["record_ids"] = [s.record_id for s in sources]
        msg["category"] = category
        msg["tokens"] = tokens + self.overhead
        if "block_id" not in msg:
            msg["block_id"] = block_id(msg, sources[0].record_id if sources else None)
        if "retention" not in msg:
            msg["retention"] = RETENTION.get(category, "compressible")
        if "decision" not in msg:
            msg["decision"] = "kept"  # R4.2: every block says why it is there
        if "reason" not in msg:
            msg["reason"] = KEPT_BECAUSE.get(category, "in_thread")
        if category == "task":
            self.task_indices.append(len(self.messages))
        self.messages.append(msg)
        counts = self.tokens
        counts[category] = counts.get(category, 0) + tokens
        self.message_counts[category] = self.message_counts.get(category, 0) + 1
        counts["envelope"] = counts.get("envelope", 0) + self.overhead
