"""Who may do what (R3.3, R15.4): the principal of a request from its API key, and the
session or release it acts on as its space sees it."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from domain.auth import (
    Action,
    Principal,
    SessionScope,
    acting,
    authorize,
    authorize_release,
    grant_to_check,
    key_id_of,
    verify,
)
from schemas.errors import NotFound, Unauthenticated
from services.prepare.publishing import ReleaseBook
from storage.api_keys import StoredKey
from storage.releases import Release
from storage.sessions import Sessions

# A live key by id (``storage.api_keys.find_key`` over the pool).
KeyLookup = Callable[[str], Awaitable[StoredKey | None]]


@dataclass
class Access:
    find_key: KeyLookup
    sessions: Sessions
    releases: ReleaseBook
    # Verified keys and found grants are looked up again after this long: a revoked key
    # or grant stops working within it on every instance (a grant was cached
    # for the process's life), and a prepare does not pay a query for either.
    key_cache_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    _keys: dict[str, tuple[float, StoredKey]] = field(default_factory=dict)
    _scopes: dict[str, SessionScope] = field(default_factory=dict)  # by global id
    # (space, the id its callers send) -> global id: a name never moves to another session
    _names: dict[tuple[str, str], str] = field(default_factory=dict)
    # (session, actor) -> until when its grant is taken as live; a missing grant is never
    # cached (a new one works at once).
    _grants: dict[tuple[str, str], float] = field(default_factory=dict)

    async def authenticate(self, key: str | None, header_actor: str | None) -> Principal:
        """R15.4: the principal of a request from its API key (``Authorization: Bearer``)
        and, for a host key, the actor ``X-AgentLoom-Actor`` names."""
        key_id = key_id_of(key)
        if key is None or key_id is None:
            raise Unauthenticated(
                "an API key is required: Authorization: Bearer <key>"
                if not key
                else "malformed API key"
            )
        now = self.clock()
        cached = self._keys.get(key_id)
        if cached is None or cached[0] < now:
            stored = await self.find_key(key_id)
            if stored is None:
                self._keys.pop(key_id, None)
                raise Unauthenticated("unknown or revoked API key")
            cached = self._keys[key_id] = (now + self.key_cache_s, stored)
        if not verify(key, cached[1].digest):
            raise Unauthenticated("unknown or revoked API key")
        return acting(cached[1].credential, header_actor)

    async def authorize(
        self, sid: str, who: Principal, action: Action, *, global_id: bool = False
    ) -> SessionScope:
        """R3.3/R15.4: tenant, then ownership or a grant (``auth.authorize``). ``sid`` is
        the id the caller knows, resolved in its own space (a session's name is
        its space's; ``scope.session_id`` is the global id to act on). A session of
        another space answers exactly like an unknown one: it is not even looked at.
        ``global_id``: ``sid`` is a global id found on a row (a model call's session)."""
        if global_id:
            scope = await self._global_scope(sid)
        else:
            scope = await self._scope(who.space_id, sid)
        actor = grant_to_check(who, scope, action)
        granted = actor is not None and await self._has_grant(scope.session_id, actor)
        authorize(who, scope, action, granted).enforce()
        return scope

    async def _global_scope(self, sid: str) -> SessionScope:
        scope = self._scopes.get(sid)
        if scope is None:
            s = await self.sessions.get(sid)
            if s is None:
                raise NotFound(f"session {sid} not found")
            scope = self._scopes[sid] = SessionScope(sid, s.space_id, s.actor_id)
        return scope

    async def _scope(self, space_id: str, sid: str) -> SessionScope:
        scope = self._scopes.get(self._names.get((space_id, sid), ""))
        if scope is None:
            s = await self.sessions.resolve(space_id, sid)
            if s is None:
                raise NotFound(f"session {sid} not found")
            scope = SessionScope(s.session_id, s.space_id, s.actor_id)
            self._names[(space_id, sid)] = s.session_id
            self._scopes[s.session_id] = scope
        return scope

    async def space_of(self, sid: str) -> str:
        """The session's space: whose content store and calibration its calls use. From
        the scope ``authorize`` cached for the request (no query)."""
        scope = self._scopes.get(sid)
        if scope is not None:
            return scope.space_id
        s = await self.sessions.get(sid)
        if s is None:
            raise NotFound(f"session {sid} not found")
        self._scopes[sid] = SessionScope(sid, s.space_id, s.actor_id)
        return s.space_id

    async def _has_grant(self, sid: str, actor: str) -> bool:
        now = self.clock()
        if self._grants.get((sid, actor), -1.0) >= now:
            return True
        self._grants.pop((sid, actor), None)
        if not await self.sessions.has_grant(sid, actor):
            return False
        self._grants[(sid, actor)] = now + self.key_cache_s
        return True

    def granted(self, sid: str, actor_id: str) -> None:
        """A grant just recorded: known here without a query."""
        self._grants[(sid, actor_id)] = self.clock() + self.key_cache_s

    def revoked(self, sid: str, actor_id: str) -> None:
        """A grant just revoked: gone here at once (other instances within the TTL)."""
        self._grants.pop((sid, actor_id), None)

    async def authorized_release(self, release_id: str, who: Principal) -> Release:
        """A release as its space sees it: another space's is not found (R15.4)."""
        rel = await self.releases.get(release_id)
        authorize_release(who, release_id, rel.space_id, Action.RELEASE_READ).enforce()
        return rel
