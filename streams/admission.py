"""The processor's first step, *decode*: bytes to validated, token-counted
items in offset order. What cannot be decoded, validated or counted is dead-lettered here,
before any SQL (R3.3, R15.3) — no record stops the partition."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from domain.accounting import text_key, token_text
from domain.context.envelope import UNAUTHENTICATED, Headers
from domain.context.tokens import CachedCounter
from domain.planning import Incoming
from schemas import codec
from schemas.contracts import ContextEvent
from schemas.errors import InvalidEvent
from schemas.validation import validate_control, validate_event
from schemas.wire import ControlEvent, DeadLetter, decode_control, decode_event_and_payload
from storage.records.store import IngestStore
from streams.envelopes import Authenticator
from streams.faults import describe_failure
from streams.outgoing import ProcessorConfig, dead_letter

CONTROL_EVENT_NAME = "agentloom.context.v1.ControlEvent"
YIELD_EVERY = 64  # messages decoded between two yields to the event loop
_UNSIGNED = "not signed by a live key of this deployment, or the signature does not verify"
_NOT_CONTROL = "a control event signed by a signer that does not make this kind"
_OTHER_SPACE = "the event's space is not the signing key's space (or the key is not a host key)"


@dataclass(frozen=True)
class RawMessage:
    key: bytes | None
    value: bytes | None
    partition: int
    offset: int
    # The envelope headers (domain.context.envelope); the driver keeps only those.
    headers: Headers | None = None


@dataclass(frozen=True)
class Control:
    """A decoded, validated control event and where it came from."""

    partition: int
    offset: int
    event: ControlEvent
    msg: RawMessage


Item = Incoming | Control


@dataclass
class Admitted:
    """A batch after decoding: the items to apply, in offset order, and the dead letters
    of what was refused on the way."""

    items: list[Item] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)


class Admission:
    """Decode, validate and count a batch, in offset order."""

    def __init__(
        self, counter: CachedCounter, config: ProcessorConfig, auth: Authenticator
    ) -> None:
        self.counter = counter
        self.config = config
        self.auth = auth

    async def admit(self, store: IngestStore, batch: list[RawMessage]) -> Admitted:
        out = Admitted()
        decoded: list[tuple[RawMessage, ContextEvent, dict[str, Any]]] = []
        controls: list[Control] = []
        signers = await self.auth.signers(batch)
        for n, (msg, signer) in enumerate(zip(batch, signers, strict=True)):
            if n % YIELD_EVERY == YIELD_EVERY - 1:
                # Let an earlier chunk's transaction take its next step (processor.handle
                # overlaps them): decoding is CPU, the transaction mostly waits.
                await asyncio.sleep(0)
            try:
                if signer is None:  # nothing of an unsigned message is decoded
                    raise InvalidEvent(_UNSIGNED, reason_code=UNAUTHENTICATED)
                if msg.value is None:
                    raise InvalidEvent("empty message value", reason_code="empty_value")
                if codec.writer_name(msg.value) == CONTROL_EVENT_NAME:
                    ctl = _decode_control(msg.value)
                    if not signer.may_write_control(type(ctl.body).__name__):
                        raise InvalidEvent(_NOT_CONTROL, reason_code=UNAUTHENTICATED)
                    validate_control(ctl)
                    controls.append(Control(msg.partition, msg.offset, ctl, msg))
                    continue
                ev, payload_wire = decode_event_and_payload(msg.value)
                if not signer.may_write_event(ev.scope.space_id):
                    raise InvalidEvent(_OTHER_SPACE, reason_code=UNAUTHENTICATED)
                validate_event(ev)
                decoded.append((msg, ev, payload_wire))
            except InvalidEvent as exc:
                out.dead.append(self.dead(msg, exc.reason_code, exc.message, None, None))
            except Exception as exc:  # hostile bytes: whatever a decoder may raise
                reason = f"{type(exc).__name__}: {exc}"
                out.dead.append(self.dead(msg, "undecodable", reason, None, None))
        incoming = await self._count(store, decoded, out.dead)
        out.items = [*incoming, *controls]
        out.items.sort(key=lambda i: (i.partition, i.offset))
        return out

    async def known(self, store: IngestStore, admitted: Admitted) -> Admitted:
        """Keep the control events whose session is open; a control event naming a
        session that does not exist is bad input, not a reason to stop (validated ids:
        a safe query). Asked just before the transaction that applies them."""
        controls = [i for i in admitted.items if isinstance(i, Control)]
        if not controls:
            return admitted
        known = await store.open_sessions(sorted({c.event.session_id for c in controls}))
        out = Admitted(dead=list(admitted.dead))
        for item in admitted.items:
            if not isinstance(item, Control) or item.event.session_id in known:
                out.items.append(item)
                continue
            reason = f"session {item.event.session_id} is not open"
            out.dead.append(
                self.dead(item.msg, "unknown_session", reason, None, item.event.event_key)
            )
        return out

    async def _count(
        self,
        store: IngestStore,
        decoded: list[tuple[RawMessage, ContextEvent, dict[str, Any]]],
        dead: list[DeadLetter],
    ) -> list[Incoming]:
        # A reference resolves only among its own space's blobs.
        refs = [(ev.scope.space_id, ev.content.ref) for _, ev, _ in decoded if ev.content.ref]
        blobs = await store.blob_tokens(refs) if refs else {}
        out: list[Incoming] = []
        for msg, obj, payload_wire in decoded:
            try:
                tokens, method = self._tokens(obj, blobs)
            except InvalidEvent as exc:
                sid, key = obj.scope.session_id, obj.event_key
                dead.append(self.dead(msg, exc.reason_code, exc.message, sid, key))
                continue
            except Exception as exc:  # a tokenizer that chokes on one text
                code, reason = describe_failure(exc)
                dead.append(self.dead(msg, code, reason, obj.scope.session_id, obj.event_key))
                continue
            out.append(Incoming(obj, msg.partition, msg.offset, tokens, method, payload_wire))
        return out

    def _tokens(
        self, ev: ContextEvent, blobs: dict[tuple[str, str], tuple[int, str, int]]
    ) -> tuple[int, str]:
        text = token_text(ev)
        if text is not None:
            return self.counter.count_keyed(text_key(text), text), self.counter.method
        found = blobs.get((ev.scope.space_id, ev.content.ref or ""))
        if found is None:
            # R3.4: large content is stored first; a dangling reference is bad input, and
            # so is another space's blob — refused alike, so nothing tells them apart.
            raise InvalidEvent(
                f"content ref {ev.content.ref} is not stored", reason_code="blob_missing"
            )
        tokens, method, length = found
        if length != ev.content.length:
            raise InvalidEvent(
                f"content.length {ev.content.length} but the stored blob has {length} bytes",
                reason_code="content_length_mismatch",
            )
        return tokens, method

    def dead(
        self, msg: RawMessage, code: str, reason: str, session_id: str | None, event_key: str | None
    ) -> DeadLetter:
        return dead_letter(
            self.config,
            msg.partition,
            msg.offset,
            code,
            reason,
            session_id,
            event_key,
            msg.key,
            msg.value,
        )

    def dead_item(self, item: Item, code: str, reason: str) -> DeadLetter:
        """A dead letter for a decoded item; its raw bytes are added when it is sent."""
        if isinstance(item, Control):
            return self.dead(item.msg, code, reason, item.event.session_id, item.event.event_key)
        return dead_letter(
            self.config,
            item.partition,
            item.offset,
            code,
            reason,
            item.event.scope.session_id,
            item.event.event_key,
        )


def _decode_control(data: bytes) -> ControlEvent:
    try:
        return decode_control(data)
    except InvalidEvent:
        raise
    except (KeyError, TypeError, ValueError) as exc:  # e.g. a covered range of 3 numbers
        raise InvalidEvent(
            f"control event does not map to the contract: {exc}", reason_code="bad_control"
        ) from exc
