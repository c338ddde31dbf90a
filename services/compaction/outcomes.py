"""A job's outcome on the wire: the control event published to the session's partition,
where the session processor commits or rejects it (R11.6)."""

from __future__ import annotations

import time

from schemas.wire import (
    CompactionOutcome,
    CompactionRequest,
    ControlEvent,
    decode_control,
    encode_control,
)


def outcome_event(req: CompactionRequest, outcome: CompactionOutcome) -> bytes:
    """The encoded event; its key ``outcome:<job>`` makes a republished one a duplicate."""
    return encode_control(
        ControlEvent(
            f"outcome:{req.job_id}",
            req.session_id,
            req.run_id,
            req.instance_id,
            int(time.time() * 1000),
            outcome,
        )
    )


def outcome_of(data: bytes) -> CompactionOutcome:
    body = decode_control(data).body
    if not isinstance(body, CompactionOutcome):
        raise TypeError(f"saved outcome is a {type(body).__name__}, not a CompactionOutcome")
    return body
