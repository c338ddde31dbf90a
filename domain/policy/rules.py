"""Field rules of the ContextPolicy (R7.7, R17). Pure.

Every rule raises ``InvalidPolicy`` whose details carry ``path`` (the dotted field path,
``compaction.summary_max_ratio``), ``field`` (its last segment, kept for callers that
validated one section alone) and ``rule`` (a stable machine-readable code). A form shows
the message beside ``path``; a script branches on ``rule``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

from schemas.errors import InvalidPolicy
from schemas.limits import MAX_ID_LEN


def leaf(path: str) -> str:
    return path.rpartition(".")[2]


def refuse(path: str, message: str, rule: str, **details: Any) -> InvalidPolicy:
    return InvalidPolicy(f"{path} {message}", field=leaf(path), path=path, rule=rule, **details)


def join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def known_keys(raw: Any, allowed: Collection[str], prefix: str) -> Mapping[str, Any]:
    """``raw`` must be an object whose keys are all ``allowed``: a typo is refused, never
    silently ignored."""
    if not isinstance(raw, Mapping):
        raise refuse(prefix or "policy", "must be an object", "not_an_object")
    unknown = sorted(str(k) for k in set(raw) - set(allowed))
    if unknown:
        where = f"{prefix} fields" if prefix else "policy fields"
        raise InvalidPolicy(
            f"unknown {where}: {unknown}",
            field=unknown[0],
            path=join(prefix, unknown[0]),
            paths=[join(prefix, u) for u in unknown],
            rule="unknown_field",
            fields=unknown,
        )
    return raw


def required(path: str, v: Any) -> Any:
    if v is None:
        raise refuse(path, "is required", "required")
    return v


def ratio(path: str, v: Any, nullable: bool) -> float | None:
    """A share of InputBudget: a number in the open interval (0, 1)."""
    if v is None and nullable:
        return None
    required(path, v)
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < 1:
        raise refuse(path, "must be a number in (0, 1)", "ratio_range", value=v)
    return float(v)


def count(path: str, v: Any, nullable: bool, cap: int | None = None) -> int | None:
    """A positive integer (a bool is not one), at most the platform ``cap``."""
    if v is None and nullable:
        return None
    required(path, v)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise refuse(path, "must be a positive integer", "positive_integer", value=v)
    if cap is not None and v > cap:
        raise refuse(
            path, f"must be at most the platform cap {cap}", "platform_cap", value=v, cap=cap
        )
    return v


def tokens(path: str, v: Any, nullable: bool, cap: int) -> int | None:
    """A token amount that may be zero (an output reserve, a safety margin)."""
    if v is None and nullable:
        return None
    required(path, v)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise refuse(path, "must be a non-negative integer", "non_negative_integer", value=v)
    if v > cap:
        raise refuse(
            path, f"must be at most the platform cap {cap}", "platform_cap", value=v, cap=cap
        )
    return v


def positive(path: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < math.inf:
        raise refuse(path, "must be a positive number", "positive_number", value=v)
    return float(v)


def flag(path: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise refuse(path, "must be true or false", "boolean", value=v)
    return v


def name(path: str, v: Any, nullable: bool) -> str | None:
    """An identifier: a non-empty string of at most MAX_ID_LEN characters."""
    if v is None and nullable:
        return None
    required(path, v)
    if not isinstance(v, str) or not v.strip() or len(v) > MAX_ID_LEN:
        raise refuse(
            path, f"must be a non-empty name of at most {MAX_ID_LEN} characters", "name", value=v
        )
    return v


def choice(path: str, v: Any, options: Collection[str]) -> str:
    if not isinstance(v, str) or v not in options:
        raise refuse(
            path,
            f"must be one of {sorted(options)}",
            "not_an_option",
            value=v,
            options=sorted(options),
        )
    return str(v)
