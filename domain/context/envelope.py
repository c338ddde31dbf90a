"""Signed envelopes: who wrote a message on the records topic (docs/security.md) — pure.

The broker authenticates connections (SASL) and limits each principal to its topics
(ACLs), but it does not tell a consumer who wrote a message. So every message on the
records topic carries two headers that the processor checks before it decodes a byte:

- ``alc-signer``: ``key:<key_id>`` for a runtime, which signs with its API key of one
  space, or ``service:<name>`` for Prepare and the compaction service, which sign with
  a secret derived from the deployment's service secret;
- ``alc-sig``: HMAC-SHA256 over the message key and value, hex.

A runtime's signing secret is the sha256 of its API key: the runtime derives it from
the key it holds, and the processor reads it from ``api_keys.key_sha256`` (the digest
the HTTP API already stores). A revoked or unknown key, a wrong signature, a key of
another space than the event's, or a control event not signed by the service that makes
that kind, is refused as ``unauthenticated_event``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Protocol

SIGNER_HEADER = "alc-signer"
SIGNATURE_HEADER = "alc-sig"
UNAUTHENTICATED = "unauthenticated_event"

# Who may sign which control event (by the event body's type name).
CONTROL_SIGNERS = {
    "BudgetObservation": frozenset({"prepare"}),
    "CompactionOutcome": frozenset({"compaction"}),
}
# Services that write context events for a session of any space (Prepare's run
# lifecycle events, after its own authorization of the HTTP call).
EVENT_SERVICES = frozenset({"prepare"})

Headers = list[tuple[str, bytes]]
_KEY_ID = re.compile(r"^[0-9a-f]{16}$")  # domain.auth: a key's public id


def signature(secret: bytes, key: bytes | None, value: bytes) -> str:
    """HMAC-SHA256 of the message key and value; the key's length first, so that no
    split of the same bytes between key and value signs alike."""
    mac = hmac.new(secret, len(key or b"").to_bytes(4, "big"), hashlib.sha256)
    mac.update(key or b"")
    mac.update(value)
    return mac.hexdigest()


def key_secret(key_sha256_hex: str) -> bytes:
    """A runtime's signing secret: the sha256 of its API key (``domain.auth.key_digest``)."""
    return bytes.fromhex(key_sha256_hex)


def service_secret(root: bytes, service: str) -> bytes:
    """A service's signing secret, derived from the deployment's service secret."""
    return hmac.new(root, f"agentloom-bus-service:{service}".encode(), hashlib.sha256).digest()


@dataclass(frozen=True)
class BusKey:
    """A live API key as the bus sees it."""

    space_id: str
    kind: str  # domain.auth.KeyKind value
    key_sha256: str


class Signer(Protocol):
    def headers(self, key: bytes | None, value: bytes) -> Headers:
        """The envelope headers of one message."""


@dataclass(frozen=True)
class KeySigner:
    """A runtime signing with its API key (``alc_<key_id>_<secret>``)."""

    key_id: str
    secret: bytes

    @classmethod
    def of(cls, key_id: str, key_sha256_hex: str) -> KeySigner:
        return cls(key_id, key_secret(key_sha256_hex))

    def headers(self, key: bytes | None, value: bytes) -> Headers:
        return [
            (SIGNER_HEADER, f"key:{self.key_id}".encode()),
            (SIGNATURE_HEADER, signature(self.secret, key, value).encode()),
        ]


@dataclass(frozen=True)
class ServiceSigner:
    """Prepare or the compaction service signing with its derived secret."""

    service: str
    secret: bytes

    @classmethod
    def of(cls, service: str, root: bytes) -> ServiceSigner:
        return cls(service, service_secret(root, service))

    def headers(self, key: bytes | None, value: bytes) -> Headers:
        return [
            (SIGNER_HEADER, f"service:{self.service}".encode()),
            (SIGNATURE_HEADER, signature(self.secret, key, value).encode()),
        ]


@dataclass(frozen=True)
class Envelope:
    """What a message's headers claim: the signer's kind (``key`` or ``service``), its
    id and the signature. ``None`` from ``envelope_of`` when the headers are missing or
    malformed."""

    kind: str
    signer_id: str
    sig: str


def envelope_headers(headers: object) -> Headers | None:
    """The envelope headers among a consumed message's headers (aiokafka gives a
    sequence of (name, bytes) pairs, faust a list or a mapping); the rest are dropped."""
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, dict) else headers
    out = [
        (str(k), bytes(v))
        for k, v in pairs  # type: ignore[attr-defined]
        if k in (SIGNER_HEADER, SIGNATURE_HEADER) and isinstance(v, bytes | bytearray)
    ]
    return out or None


def envelope_of(headers: Headers | None) -> Envelope | None:
    found: dict[str, bytes] = {}
    for name, value in headers or ():
        if name in (SIGNER_HEADER, SIGNATURE_HEADER):
            if name in found:  # two signers or two signatures: refuse, never pick one
                return None
            found[name] = value
    try:
        signer = found[SIGNER_HEADER].decode("ascii")
        sig = found[SIGNATURE_HEADER].decode("ascii")
    except (KeyError, UnicodeDecodeError):
        return None
    kind, _, signer_id = signer.partition(":")
    if kind not in ("key", "service") or not signer_id or len(sig) != 64:
        return None
    if kind == "key" and not _KEY_ID.match(signer_id):
        return None
    return Envelope(kind, signer_id, sig)


def verifies(env: Envelope, secret: bytes, key: bytes | None, value: bytes) -> bool:
    return hmac.compare_digest(env.sig, signature(secret, key, value))
