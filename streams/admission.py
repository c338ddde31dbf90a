"""The processor's first step, *decode*: bytes to validated, token-counted
items in offset order. What cannot be decoded, validated or counted is dead-lettered here,
before any SQL (R3.3, R15.3) — no record stops the partition."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any

from domain.accounting import text_key, token_text
from domain.context.envelope import UNAUTHENTICATED, Headers
from domain.context.tokens import CachedCounter
from domain.planning.state import Incoming
from schemas import codec
from schemas.contracts import ContextEvent
from schemas.errors import InvalidEvent
from schemas.limits import MAX_KEY_LEN, UNSTORABLE, id_problem
from schemas.validation import validate_control, validate_event
from schemas.wire import ControlEvent, DeadLetter, decode_control, decode_event_and_payload
from storage.records.outcomes import RefusedEvent
from storage.records.store import IngestStore
from streams.envelopes import Authenticator, Signed
from streams.faults import describe_failure
from streams.outgoing import ProcessorConfig, dead_letter

CONTROL_EVENT_NAME = "agentloom.context.v1.ControlEvent"
YIELD_EVERY = 64  # messages decoded between two yields to the event loop
_UNSIGNED = "not signed by a live key of this deployment, or the signature does not verify"
_NOT_CONTROL = "a control event signed by a signer that does not make this kind"
_OTHER_SPACE = "the event's space is not the signing key's space (or the key is not a host key)"
_OTHER_KEY = "the message key is not the event's session id"
KEY_MISMATCH = "key_mismatch"
MAX_OUTCOME_MESSAGE = 2000  # characters of a refusal's reason kept as its outcome
KNOWN_SESSIONS = 65_536  # sessions remembered as existing, then forgotten at once


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
    """A batch after decoding: the items to apply, in offset order, the dead letters of
    what was refused on the way, and the refusals to record as their events' outcomes."""

    items: list[Item] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    refused: list[RefusedEvent] = field(default_factory=list)


@dataclass(frozen=True)
class _Decoded:
    msg: RawMessage
    event: ContextEvent
    payload_wire: dict[str, Any]
    space_id: str | None  # the verified signer's (signer_space)


class Admission:
    """Decode, validate and count a batch, in offset order."""

    def __init__(
        self, counter: CachedCounter, config: ProcessorConfig, auth: Authenticator
    ) -> None:
        self.counter = counter
        self.config = config
        self.auth = auth
        # Sessions known to exist: a session is never deleted, so once seen it is not
        # asked for again (a control event per agent step asked every batch, issue 37).
        self.sessions: set[str] = set()

    async def admit(self, store: IngestStore, batch: list[RawMessage]) -> Admitted:
        out = Admitted()
        decoded: list[_Decoded] = []
        signers = await self.auth.signers(batch)
        for n, (msg, signer) in enumerate(zip(batch, signers, strict=True)):
            if n % YIELD_EVERY == YIELD_EVERY - 1:
                # Let an earlier chunk's transaction take its next step (processor.handle
                # overlaps them): decoding is CPU, the transaction mostly waits.
                await asyncio.sleep(0)
            item = self._decode(msg, signer, out)
            if isinstance(item, Control):
                out.items.append(item)
            elif item is not None:
                decoded.append(item)
        incoming = await self._count(store, decoded, out)
        out.items = [*incoming, *out.items]
        out.items.sort(key=lambda i: (i.partition, i.offset))
        return out

    def _decode(
        self, msg: RawMessage, signer: Signed | None, out: Admitted
    ) -> Control | _Decoded | None:
        """The message decoded and checked, or None when it was refused (into ``out``)."""
        ev: ContextEvent | None = None
        try:
            if signer is None:  # nothing of an unsigned message is decoded
                raise InvalidEvent(_UNSIGNED, reason_code=UNAUTHENTICATED)
            if msg.value is None:
                raise InvalidEvent("empty message value", reason_code="empty_value")
            if codec.writer_name(msg.value) == CONTROL_EVENT_NAME:
                return _control(msg, signer)
            ev, payload_wire = decode_event_and_payload(msg.value)
            if not signer.may_write_event(ev.scope.space_id):
                raise InvalidEvent(_OTHER_SPACE, reason_code=UNAUTHENTICATED)
            validate_event(ev)
            _same_key(msg, ev.scope.session_id)
            return _Decoded(msg, ev, payload_wire, signer_space(signer, ev))
        except InvalidEvent as exc:
            code, reason = exc.reason_code, exc.message
        except Exception as exc:  # hostile bytes: whatever a decoder may raise
            code, reason = "undecodable", f"{type(exc).__name__}: {exc}"
        self._refuse(out, msg, signer_space(signer, ev), ev, code, reason)
        return None

    def _refuse(
        self,
        out: Admitted,
        msg: RawMessage,
        space_id: str | None,
        ev: ContextEvent | None,
        code: str,
        reason: str,
    ) -> None:
        """Dead-letter ``msg`` under its signer's space. When the event is of that very
        space, its refusal is also its outcome (recorded only if its session is of that
        space and actor: storage.records.outcomes), and the letter names its session."""
        sid = key = None
        if ev is not None and space_id is not None and attributable(ev, space_id):
            sid, key = ev.scope.session_id, ev.event_key
            message = UNSTORABLE.sub("\ufffd", reason)[:MAX_OUTCOME_MESSAGE]
            out.refused.append(RefusedEvent(sid, key, code, message, space_id, ev.scope.actor_id))
        out.dead.append(self.dead(msg, code, reason, sid, key, space_id))

    async def known(self, store: IngestStore, admitted: Admitted) -> Admitted:
        """Keep the control events whose session is open; a control event naming a
        session that does not exist is bad input, not a reason to stop (validated ids:
        a safe query). Asked just before the transaction that applies them."""
        controls = [i for i in admitted.items if isinstance(i, Control)]
        if not controls:
            return admitted
        named = {c.event.session_id for c in controls}
        if not named <= self.sessions:
            if len(self.sessions) > KNOWN_SESSIONS:
                self.sessions.clear()
            self.sessions |= await store.open_sessions(sorted(named - self.sessions))
        known = self.sessions
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
        self, store: IngestStore, decoded: list[_Decoded], out: Admitted
    ) -> list[Incoming]:
        # A reference resolves only among its own space's blobs.
        refs = [(d.event.scope.space_id, r) for d in decoded if (r := d.event.content.ref)]
        blobs = await store.blob_tokens(refs) if refs else {}
        counted: list[Incoming] = []
        for d in decoded:
            try:
                tokens, method = self._tokens(d.event, blobs)
            except InvalidEvent as exc:
                self._refuse(out, d.msg, d.space_id, d.event, exc.reason_code, exc.message)
                continue
            except Exception as exc:  # a tokenizer that chokes on one text
                code, reason = describe_failure(exc)
                self._refuse(out, d.msg, d.space_id, d.event, code, reason)
                continue
            msg = d.msg
            counted.append(
                Incoming(d.event, msg.partition, msg.offset, tokens, method, d.payload_wire)
            )
        return counted

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
        self,
        msg: RawMessage,
        code: str,
        reason: str,
        session_id: str | None,
        event_key: str | None,
        space_id: str | None = None,
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
            space_id,
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
            space_id=item.event.scope.space_id,
        )


async def record_refusals(store: IngestStore, admitted: Admitted) -> list[DeadLetter]:
    """Record what admission refused as its events' outcomes (rare: a transaction of its
    own, before the batch's); the batch's dead letters. A letter names its event's
    session only when that session is of the event's own space and actor — never a
    session of another space it claims."""
    if not admitted.refused:
        return list(admitted.dead)
    async with store.transaction():
        own = await store.record_refusals(admitted.refused)
    claimed = {(r.session_id, r.event_key) for r in admitted.refused} - own
    return [
        replace(d, session_id=None) if (d.session_id, d.event_key) in claimed else d
        for d in admitted.dead
    ]


def _control(msg: RawMessage, signer: Signed) -> Control:
    """A control event, signed by the service that makes its kind, on its session's key."""
    ctl = _decode_control(msg.value or b"")
    if not signer.may_write_control(type(ctl.body).__name__):
        raise InvalidEvent(_NOT_CONTROL, reason_code=UNAUTHENTICATED)
    validate_control(ctl)
    _same_key(msg, ctl.session_id)
    return Control(msg.partition, msg.offset, ctl, msg)


def _same_key(msg: RawMessage, session_id: str) -> None:
    """The message key is the session id: the session's partition, and so its single
    writer (a message keyed otherwise would be applied beside another partition's
    events of the same session, out of their order)."""
    if msg.key != session_id.encode():
        raise InvalidEvent(_OTHER_KEY, reason_code=KEY_MISMATCH)


def signer_space(signer: Signed | None, ev: ContextEvent | None) -> str | None:
    """The space a message counts under: its verified signer's — a runtime key's own
    space, or for Prepare (which writes for the sessions it authorized) the event's.
    None for an unsigned message and for a service that does not write events."""
    if signer is None:
        return None
    if signer.kind == "key":
        return signer.space_id
    if ev is not None and signer.may_write_event(ev.scope.space_id):
        return ev.scope.space_id
    return None


def attributable(ev: ContextEvent, space_id: str) -> bool:
    """Whether a refusal of ``ev`` is its own session's to know: the event is of its
    signer's space, and its ids are ones a table can hold (an event refused for its
    ids records nothing)."""
    s = ev.scope
    return (
        s.space_id == space_id
        and id_problem(ev.event_key, MAX_KEY_LEN) is None
        and all(id_problem(x) is None for x in (s.space_id, s.actor_id, s.session_id))
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
