"""Signed envelopes: who wrote a message on the records topic (docs/security.md) — pure.

The broker authenticates connections (SASL) and limits each principal to its topics
(ACLs), but it does not tell a consumer who wrote a message. So every message on the
records topic carries two headers that the processor checks before it decodes a byte:

- ``alc-signer``: ``key:<key_id>`` for a runtime, which signs with its host API key of
  one space, or ``service:<name>`` for Prepare and the compaction service, each with
  its own signing key (the operator generates one per service; no service holds
  another's, and nothing derives one from another);
- ``alc-sig``: HMAC-SHA256 over the message key and value, hex.

A runtime's signing secret is an HMAC of its API key (``runtime_secret``): the runtime
computes it from the key it holds. A host key's secret part is itself an HMAC of its id
under the *key issuer secret* (``domain.auth.host_key``), which only the key-issuing
tool and the processor hold; so the processor derives the signing secret from the key
id, and nothing stored in the database (``api_keys.key_sha256`` is the sha256 of the
whole key) lets anyone sign. The processor accepts every secret of its
``VerifyKeys``: during a rotation a service has two (current and previous), and the
issuer secret may have two. A revoked or unknown key, a wrong signature, a key of
another space than the event's, or a control event not signed by the service that makes
that kind, is refused as ``unauthenticated_event``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from domain.auth import host_key

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


def runtime_secret(api_key: str) -> bytes:
    """A runtime's signing secret: its API key's HMAC under a fixed label (not the
    key's sha256, which the database stores)."""
    return hmac.new(api_key.encode(), b"agentloom-bus-sign", hashlib.sha256).digest()


def issued_runtime_secrets(issuers: tuple[bytes, ...], key_id: str) -> tuple[bytes, ...]:
    """The signing secrets a host key ``key_id`` may have, one per issuer secret: what
    the processor checks a runtime's envelope against."""
    return tuple(runtime_secret(host_key(key_id, issuer).key) for issuer in issuers)


@dataclass(frozen=True)
class VerifyKeys:
    """What the processor checks envelopes with: each service's signing keys (current
    first; two during a rotation) and the key issuer secrets (likewise)."""

    services: Mapping[str, tuple[bytes, ...]] = field(default_factory=dict)
    issuers: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class BusKey:
    """A live API key as the bus sees it (its digest is of no use to the bus)."""

    space_id: str
    kind: str  # domain.auth.KeyKind value


class Signer(Protocol):
    def headers(self, key: bytes | None, value: bytes) -> Headers:
        """The envelope headers of one message."""


@dataclass(frozen=True)
class KeySigner:
    """A runtime signing with its API key (``alc_<key_id>_<secret>``)."""

    key_id: str
    secret: bytes

    @classmethod
    def of(cls, key_id: str, api_key: str) -> KeySigner:
        return cls(key_id, runtime_secret(api_key))

    def headers(self, key: bytes | None, value: bytes) -> Headers:
        return [
            (SIGNER_HEADER, f"key:{self.key_id}".encode()),
            (SIGNATURE_HEADER, signature(self.secret, key, value).encode()),
        ]


@dataclass(frozen=True)
class ServiceSigner:
    """Prepare or the compaction service signing with its own signing key."""

    service: str
    secret: bytes

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
