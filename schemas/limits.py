"""Size and character limits shared by the HTTP API and the bus: pure, no I/O.

One set of numbers, so that a request Prepare accepts is never an event the processor
has to dead-letter, and neither hands PostgreSQL a value it cannot store or index.
"""

from __future__ import annotations

import re
from typing import TypeGuard

# Ids (session, run, instance, release, actor, space, record, call, prepared ids).
# A btree index row holds at most 2704 bytes and `records_thread` indexes session_id,
# run_id and instance_id together: at 4 UTF-8 bytes per character, three 128-character
# ids take 1536 bytes, and (session_id, event_key) 512 + 2048.
MAX_ID_LEN = 128
# A run id leaves room for the ids derived from it (the main thread is "<run_id>.main").
MAX_RUN_ID_LEN = MAX_ID_LEN - 8
# Idempotency keys (event_key): they embed ids ("run_started:<run_id>").
MAX_KEY_LEN = 512
# No control character (C0, DEL, C1) in an id: PostgreSQL text cannot hold U+0000 and
# the others are never meant. JSON Schema / OpenAPI form (ECMA-262 and Python re alike).
ID_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]+$"

# Decoded JSON: nesting beyond this is refused before it reaches a recursive encoder
# (json, orjson, jsonb) — tool arguments nested 100,000 deep exhaust any stack.
MAX_JSON_DEPTH = 64

# Integers that reach bigint columns or Kafka offsets, and int columns / partitions.
MAX_INT64 = 2**63 - 1
MAX_INT32 = 2**31 - 1
# Exact in every JSON parser (and in a double): Kafka offsets a caller sends back.
MAX_JSON_INT = 2**53 - 1
# Characters per page of a record read (R11.8).
MAX_READ_LIMIT = 1 << 20

# No text or jsonb value can hold U+0000, and UTF-8 cannot encode a lone surrogate
# (json.loads makes one from "\\ud800").
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_ID_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def id_problem(value: str, max_len: int = MAX_ID_LEN) -> str | None:
    """Why ``value`` cannot be an id (None when it can)."""
    if not value or len(value) > max_len:
        return f"must be 1..{max_len} characters"
    if _ID_FORBIDDEN.search(value):
        return "must not contain control characters or lone surrogates"
    return None


def _past_64_bits(v: object) -> TypeGuard[int]:
    return type(v) is int and not -MAX_INT64 - 1 <= v <= MAX_INT64  # bool is no int here


def json_problem(value: object, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Why a decoded JSON value cannot be stored (None when it can): a string or key
    holding U+0000 or a lone surrogate, an integer outside 64 bits (the JSON encoders
    refuse it: a model-call ``usage`` of 10**34 was a 500), or containers nested deeper
    than ``max_depth``. Iterative, so a hostile depth cannot exhaust the stack here."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, str):
            if UNSTORABLE.search(v):
                return "text must not contain U+0000 or lone surrogates"
        elif _past_64_bits(v):
            return f"integers must fit in 64 bits (one of {v.bit_length()} bits)"
        elif isinstance(v, dict | list | tuple):
            if depth >= max_depth:
                return f"JSON nested deeper than {max_depth} levels"
            items = v.items() if isinstance(v, dict) else enumerate(v)
            for k, item in items:
                if isinstance(k, str) and UNSTORABLE.search(k):
                    return "keys must not contain U+0000 or lone surrogates"
                if _past_64_bits(item):
                    bits = item.bit_length()
                    return f"integers must fit in 64 bits ({k!r} holds one of {bits} bits)"
                if isinstance(item, str | dict | list | tuple):
                    stack.append((item, depth + 1))
    return None
