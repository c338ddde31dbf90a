"""How a planned record becomes a row of ``records``: the column order COPY writes and
the row values (the payload as JSON, the resource a record derives from)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from domain.planning.state import BatchPlan
from schemas.contracts import to_wire

RECORD_COLUMNS = (
    "session_id",
    "session_sequence",
    "record_id",
    "event_key",
    "space_id",
    "actor_id",
    "run_id",
    "instance_id",
    "instance_sequence",
    "kind",
    "authority",
    "visibility",
    "operation_id",
    "content_inline",
    "content_ref",
    "content_sha256",
    "content_length",
    "media_type",
    "payload",
    "token_count",
    "token_method",
    "producer",
    "occurred_at_ms",
    "source_partition",
    "source_offset",
    "resource_ref",
)


def resource_ref(ev: Any) -> str | None:
    """The resource a record derives from: the host's ``source.resource_version``
    (``resource_id`` or ``resource_id@version``), a skill load's skill, or the resource a
    ``resource_activation`` (de)activates."""
    if ev.source.resource_version:
        return str(ev.source.resource_version).split("@", 1)[0]
    p = ev.payload
    skill = getattr(p, "skill", None)
    if skill is not None:
        return str(skill.name)
    rid = getattr(p, "resource_id", None)
    return str(rid) if rid else None


def _payload_json(payload: Any, wire: dict[str, Any] | None) -> Any:
    out: dict[str, Any] = to_wire(payload) if wire is None else {**wire}
    out["type"] = type(payload).__name__
    return out


def record_rows(plan: BatchPlan) -> Iterable[tuple[Any, ...]]:
    for nr in plan.records:
        ev, inc = nr.incoming.event, nr.incoming
        c = ev.content
        yield (
            ev.scope.session_id,
            nr.session_sequence,
            nr.record_id,
            ev.event_key,
            ev.scope.space_id,
            ev.scope.actor_id,
            ev.scope.run_id,
            ev.scope.instance_id,
            nr.instance_sequence,
            str(ev.kind),
            str(ev.authority),
            str(ev.visibility),
            ev.operation_id,
            c.inline,
            c.ref,
            c.sha256,
            c.length,
            c.media_type,
            _payload_json(ev.payload, inc.payload_wire),
            inc.token_count,
            inc.token_method,
            ev.source.producer,
            ev.source.occurred_at_ms,
            inc.partition,
            inc.offset,
            resource_ref(ev),
        )
