"""``model_steps`` (R7.3): model steps since the last committed summary reached
``compaction.model_steps``."""

from __future__ import annotations

from domain.compaction.trigger_kinds.kind import counter_kind

REASON = "model_steps"
KIND = counter_kind(REASON)
