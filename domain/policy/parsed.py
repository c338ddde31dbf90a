"""A release's policy, parsed once per policy revision.

Releases are frozen (R17) and a policy revision names one effective policy (the hash of
its canonical JSON), so the parsed ``ContextPolicy`` of a revision never changes. The
processor (every observation and pre-emptive check), the compaction service (every job)
and release loads read the stored JSON through here instead of validating it again.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from domain.policy.context_policy import ContextPolicy, validate_policy

MAX_CACHED = 1024
_parsed: OrderedDict[str, ContextPolicy] = OrderedDict()


def policy_of(revision: str, raw: Any) -> ContextPolicy:
    """The policy of ``revision``, whose stored JSON (a dict, or its text) is ``raw``."""
    found = _parsed.get(revision)
    if found is not None:
        _parsed.move_to_end(revision)
        return found
    policy = validate_policy(as_frozen(json.loads(raw) if isinstance(raw, str) else raw))
    _parsed[revision] = policy
    if len(_parsed) > MAX_CACHED:
        _parsed.popitem(last=False)
    return policy


def as_frozen(stored: Any) -> Any:
    """A stored policy as it was frozen: every field of its defaults version is explicit
    in it, so a field added since is one it never had. ``compaction.rollup`` (defaults
    version 2) absent: the release rolls up by its summarizer, as every release did
    before the field existed — never the newer default."""
    compaction = stored.get("compaction") if isinstance(stored, dict) else None
    if isinstance(compaction, dict) and "rollup" not in compaction:
        return {**stored, "compaction": {**compaction, "rollup": "summarizer"}}
    return stored
