"""``user_turns`` (R7.2): user turns since the last committed summary reached
``compaction.user_turns``."""

from __future__ import annotations

from domain.compaction.trigger_kinds.kind import counter_kind

REASON = "user_turns"
KIND = counter_kind(REASON)
