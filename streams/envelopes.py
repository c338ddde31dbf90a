"""The processor's check of signed envelopes (``domain.context.envelope``): who signed each
message of a batch, before anything is decoded.

A runtime's key is looked up in PostgreSQL (its space, kind and digest) and remembered
for ``ttl_s`` — the same 10 s within which the HTTP API sees a revoked key — so a busy
partition costs one query per key per 10 s, not one per message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from domain.context.envelope import (
    CONTROL_SIGNERS,
    EVENT_SERVICES,
    BusKey,
    Envelope,
    Headers,
    envelope_of,
    key_secret,
    service_secret,
    verifies,
)

KEY_TTL_S = 10.0
_SERVICES = frozenset(EVENT_SERVICES | {s for v in CONTROL_SIGNERS.values() for s in v})


class BusKeys(Protocol):
    async def bus_keys(self, key_ids: Sequence[str]) -> dict[str, BusKey]:
        """The live (not revoked) keys among ``key_ids``."""


@dataclass(frozen=True)
class Signed:
    """A message whose signature verified: by a runtime key of ``space_id`` (kind
    ``key``) or by the service ``signer_id`` (kind ``service``)."""

    kind: str
    signer_id: str
    space_id: str | None = None
    key_kind: str | None = None

    def may_write_event(self, space_id: str) -> bool:
        if self.kind == "service":
            return self.signer_id in EVENT_SERVICES
        return self.key_kind == "host" and self.space_id == space_id

    def may_write_control(self, body_type: str) -> bool:
        return self.kind == "service" and self.signer_id in CONTROL_SIGNERS.get(body_type, ())


class SignedMessage(Protocol):
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Headers | None: ...


class Authenticator:
    def __init__(
        self,
        keys: BusKeys,
        service_root: bytes,
        ttl_s: float = KEY_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.keys = keys
        self.ttl_s = ttl_s
        self.clock = clock
        self._services = {s: service_secret(service_root, s) for s in _SERVICES}
        self._cache: dict[str, tuple[float, BusKey | None]] = {}

    async def signers(self, batch: Sequence[SignedMessage]) -> list[Signed | None]:
        """For each message, who signed it, or ``None`` (no, malformed or wrong
        signature; unknown or revoked key)."""
        envelopes = [envelope_of(m.headers) for m in batch]
        keys = await self._lookup({e.signer_id for e in envelopes if e and e.kind == "key"})
        return [self._verify(m, e, keys) for m, e in zip(batch, envelopes, strict=True)]

    def _verify(
        self, msg: SignedMessage, env: Envelope | None, keys: dict[str, BusKey | None]
    ) -> Signed | None:
        if env is None:
            return None
        value = msg.value or b""  # a tombstone is signed as the empty value
        if env.kind == "service":
            secret = self._services.get(env.signer_id)
            if secret is None or not verifies(env, secret, msg.key, value):
                return None
            return Signed("service", env.signer_id)
        found = keys.get(env.signer_id)
        if found is None or not verifies(env, key_secret(found.key_sha256), msg.key, value):
            return None
        return Signed("key", env.signer_id, found.space_id, found.kind)

    async def _lookup(self, ids: set[str]) -> dict[str, BusKey | None]:
        now = self.clock()
        fresh = {i: hit[1] for i in ids if (hit := self._cache.get(i)) and hit[0] > now}
        missing = sorted(ids - fresh.keys())
        if missing:
            found = await self.keys.bus_keys(missing)
            for i in missing:
                fresh[i] = found.get(i)
                self._cache[i] = (now + self.ttl_s, fresh[i])
            if len(self._cache) > 10_000:  # forged ids must not grow it without bound
                self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
                if len(self._cache) > 10_000:
                    self._cache.clear()
        return fresh
