"""Who may do what (R3.3, R15.4): API keys, principals and access decisions — pure.

A caller authenticates with an API key of one tenant space (``Authorization: Bearer
<key>``). A *host* key (the agent runtime) may act for any actor inside its space, naming
it in ``X-AgentLoom-Actor``; without the header it acts as the runtime itself, which has
the owner's rights on every session of its space. A *user* key is bound to one actor; the
header, if sent, must name that actor. The actor is never taken from a body field.

Decisions here are plain functions over frozen dataclasses; looking keys, sessions and
grants up is the caller's I/O (``storage/api_keys.py``, ``PrepareService.authorize``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from enum import StrEnum

from schemas.errors import ContextError, InvalidRequest, NotFound, NotGranted, Unauthenticated

KEY_PREFIX = "alc"
_KEY = re.compile(r"^alc_([0-9a-f]{16})_([0-9a-f]{64})$")


class KeyKind(StrEnum):
    HOST = "host"  # the agent runtime: acts for any actor of its space
    USER = "user"  # one actor of one space


class Action(StrEnum):
    RELEASE_PUBLISH = "release.publish"
    RELEASE_READ = "release.read"
    SESSION_OPEN = "session.open"
    SESSION_READ = "session.read"  # the session, event outcomes, records
    SESSION_WRITE = "session.write"  # runs, prepare, the model gateway
    SESSION_GRANT = "session.grant"
    BLOB_PUT = "blob.put"


# A grant lets another actor *read* a session (R3.3); it never lets it act in it.
GRANTABLE = frozenset({Action.SESSION_READ})


@dataclass(frozen=True)
class Credential:
    """A verified API key: its id (never the secret), space, kind and bound actor."""

    key_id: str
    space_id: str
    kind: KeyKind
    actor_id: str | None = None  # set exactly for user keys


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: the credential and the actor it acts for (``None``: a host
    acting as the runtime itself)."""

    credential: Credential
    actor_id: str | None

    @property
    def space_id(self) -> str:
        return self.credential.space_id

    @property
    def key_id(self) -> str:
        return self.credential.key_id


@dataclass(frozen=True)
class SessionScope:
    """What access to a session depends on; both fields are fixed at open (R1.4)."""

    session_id: str
    space_id: str
    owner_id: str


@dataclass(frozen=True)
class Decision:
    allowed: bool
    code: str = "ok"  # ok | not_found | not_granted | unauthenticated | invalid_request
    message: str = ""

    def enforce(self) -> None:
        """Raise the error this decision stands for (nothing when allowed)."""
        if self.allowed:
            return
        error: type[ContextError] = {
            "not_found": NotFound,
            "unauthenticated": Unauthenticated,
            "invalid_request": InvalidRequest,
        }.get(self.code, NotGranted)
        raise error(self.message)


ALLOW = Decision(True)


def _deny(code: str, message: str) -> Decision:
    return Decision(False, code, message)


# --- keys -----------------------------------------------------------------------------


@dataclass(frozen=True)
class NewKey:
    key_id: str
    key: str  # shown once; only its digest is stored
    digest: str


def key_of(key_id: str, secret: str) -> NewKey:
    """The key of a 16 hex id (for lookup) and a 64 hex secret (256 random bits, drawn
    by the caller: ``storage.api_keys.new_key``)."""
    key = f"{KEY_PREFIX}_{key_id}_{secret}"
    return NewKey(key_id, key, key_digest(key))


def host_key(key_id: str, issuer: bytes) -> NewKey:
    """A host key whose secret part is the HMAC of its id under the key issuer secret:
    the runtime signs its events with a secret derived from the key
    (``domain.context.envelope.runtime_secret``), and the processor, which holds the
    issuer secret but never the key, derives the same from the id. What the database
    stores (the key's sha256) lets nobody sign. A user key signs nothing on the bus: its
    secret stays random (``storage.api_keys.new_key``)."""
    label = f"agentloom-host-key:{key_id}".encode()
    return key_of(key_id, hmac.new(issuer, label, hashlib.sha256).hexdigest())


def key_digest(key: str) -> str:
    """sha256 is enough for a key with 256 random bits: no dictionary to slow down."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def key_id_of(key: str | None) -> str | None:
    """The lookup id of a well-formed key, else None (checked before any SQL)."""
    m = _KEY.match(key or "")
    return m.group(1) if m else None


def verify(key: str, stored_digest: str) -> bool:
    return hmac.compare_digest(key_digest(key), stored_digest)


def acting(credential: Credential, header_actor: str | None) -> Principal:
    """The principal of a request: a user key acts as its actor (a header naming anyone
    else is refused); a host key acts for the actor its header names, within its space."""
    if credential.kind is KeyKind.USER:
        if header_actor is not None and header_actor != credential.actor_id:
            raise NotGranted(
                "this key is bound to another actor than X-AgentLoom-Actor names",
                actor_id=header_actor,
            )
        return Principal(credential, credential.actor_id)
    return Principal(credential, header_actor or None)


# --- decisions --------------------------------------------------------------------------


def grant_to_check(who: Principal, session: SessionScope, action: Action) -> str | None:
    """The actor whose grant on ``session`` could allow ``action``, or None when no grant
    can change the answer (so no lookup is needed)."""
    if who.space_id != session.space_id or action not in GRANTABLE:
        return None
    if who.actor_id is None or who.actor_id == session.owner_id:
        return None
    return who.actor_id


def authorize(
    who: Principal, session: SessionScope, action: Action, granted: bool = False
) -> Decision:
    """R15.4: another space's session does not exist for the caller (404, the same answer
    as an unknown id); in its space the owner — or the host, acting as itself or for the
    owner — may do anything, a granted actor may read, anyone else is refused (403)."""
    if who.space_id != session.space_id:
        return _deny("not_found", f"session {session.session_id} not found")
    if who.actor_id is None or who.actor_id == session.owner_id:
        return ALLOW
    if action in GRANTABLE and granted:
        return ALLOW
    what = "no grant on" if action in GRANTABLE else "is not the owner of"
    return _deny("not_granted", f"actor {who.actor_id} {what} session {session.session_id}")


def granted_by(who: Principal, session: SessionScope) -> str:
    """Who a grant is recorded as made by: derived, never taken from the request."""
    return who.actor_id or session.owner_id


def session_owner(who: Principal, space_id: str | None, actor_id: str | None) -> Decision | str:
    """The owner of a session ``who`` opens (its space is the key's): a user key opens only
    its own sessions; a host key opens one for any actor of its space."""
    if space_id is not None and space_id != who.space_id:
        return _deny("not_granted", f"this key cannot open sessions in space {space_id}")
    owner = actor_id or who.actor_id
    if owner is None:
        return _deny("invalid_request", "name the session's owner: actor_id or X-AgentLoom-Actor")
    if who.actor_id is not None and owner != who.actor_id:
        return _deny("not_granted", f"actor {who.actor_id} cannot open a session for {owner}")
    return owner


def authorize_release(
    who: Principal, release_id: str, release_space: str | None, action: Action
) -> Decision:
    """Releases belong to the space that published them (``None``: published before keys
    existed, shared). Another space's release does not exist for the caller; only a host
    key publishes (a release is the runtime's configuration, R1.4/R17)."""
    if release_space is not None and release_space != who.space_id:
        return _deny("not_found", f"release {release_id} not found")
    if action is Action.RELEASE_PUBLISH and who.credential.kind is not KeyKind.HOST:
        return _deny("not_granted", "only a host key publishes releases")
    return ALLOW
