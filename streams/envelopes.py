"""The processor's check of signed envelopes (``domain.context.envelope``): who signed each
message of a batch, before anything is decoded.

A runtime's key is looked up in PostgreSQL (its space and kind: whether it is live) and
remembered for ``ttl_s`` — the same 10 s within which the HTTP API sees a revoked key —
with the signing secrets derived from its id and the key issuer secrets, so a busy
partition costs one query and two HMACs per key per 10 s, not per message. The secrets
come from ``verify_keys``, called per batch: a source that re-reads its files when they
change (``streams.kafka.bus_secrets``) lets a rotation take effect without a restart.
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
    VerifyKeys,
    envelope_of,
    issued_runtime_secrets,
    verifies,
)

KEY_TTL_S = 10.0
_SERVICES = frozenset(EVENT_SERVICES | {s for v in CONTROL_SIGNERS.values() for s in v})
_CACHE_MAX = 10_000  # forged ids must not grow the key cache without bound


@dataclass(frozen=True)
class _Cached:
    until: float
    key: BusKey | None
    issuers: tuple[bytes, ...]  # what ``secrets`` were derived from
    secrets: tuple[bytes, ...]


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
        verify_keys: Callable[[], VerifyKeys],
        ttl_s: float = KEY_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.keys = keys
        self.verify_keys = verify_keys
        self.ttl_s = ttl_s
        self.clock = clock
        self._cache: dict[str, _Cached] = {}

    async def signers(self, batch: Sequence[SignedMessage]) -> list[Signed | None]:
        """For each message, who signed it, or ``None`` (no, malformed or wrong
        signature; unknown or revoked key)."""
        vk = self.verify_keys()
        envelopes = [envelope_of(m.headers) for m in batch]
        ids = {e.signer_id for e in envelopes if e and e.kind == "key"}
        keys = await self._lookup(ids, vk.issuers)
        return [self._verify(m, e, keys, vk) for m, e in zip(batch, envelopes, strict=True)]

    def _verify(
        self, msg: SignedMessage, env: Envelope | None, keys: dict[str, _Cached], vk: VerifyKeys
    ) -> Signed | None:
        if env is None:
            return None
        value = msg.value or b""  # a tombstone is signed as the empty value
        if env.kind == "service":
            secrets = vk.services.get(env.signer_id, ()) if env.signer_id in _SERVICES else ()
            for secret in secrets:  # one, or two during a rotation
                if verifies(env, secret, msg.key, value):
                    return Signed("service", env.signer_id)
            return None
        found = keys.get(env.signer_id)
        if found is None or found.key is None:
            return None
        for secret in found.secrets:
            if verifies(env, secret, msg.key, value):
                return Signed("key", env.signer_id, found.key.space_id, found.key.kind)
        return None

    async def _lookup(self, ids: set[str], issuers: tuple[bytes, ...]) -> dict[str, _Cached]:
        now = self.clock()
        fresh = {i: hit for i in ids if (hit := self._cache.get(i)) and hit.until > now}
        missing = sorted(ids - fresh.keys())
        if missing:
            found = await self.keys.bus_keys(missing)
            for i in missing:
                key = found.get(i)
                secrets = issued_runtime_secrets(issuers, i) if key is not None else ()
                fresh[i] = self._cache[i] = _Cached(now + self.ttl_s, key, issuers, secrets)
            if len(self._cache) > _CACHE_MAX:
                self._cache = {k: v for k, v in self._cache.items() if v.until > now}
                if len(self._cache) > _CACHE_MAX:
                    self._cache.clear()
        for i, hit in fresh.items():  # the issuer secrets changed (a rotation): derive again
            if hit.issuers != issuers and hit.key is not None:
                secrets = issued_runtime_secrets(issuers, i)
                fresh[i] = self._cache[i] = _Cached(hit.until, hit.key, issuers, secrets)
        return fresh
