"""Reading records back (R11.8, R13.2, R15.3), granting reads and revoking them (R3.3).

Sources stay readable after any number of compactions; a thread reads what is its own,
what its session shares and — for a child thread — what its parent exported to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.auth import Action, Principal, granted_by
from schemas.answers.content import Grant, GrantRevoked, RecordPage
from schemas.errors import InvalidRequest, NotFound, NotGranted
from services.prepare.access import Access
from services.prepare.assembly.views import ThreadViews
from services.prepare.notes import Notes
from storage.blobs import Records, StoredRecord
from storage.sessions import Sessions

SHARED = ("session", "actor")  # visibilities every thread of the session reads
MAX_READ = 1 << 20


@dataclass
class ReadBack:
    records: Records
    sessions: Sessions
    views: ThreadViews
    access: Access
    notes: Notes | None = None  # R18: a ``readback`` event per read (None: not reported)

    async def read_record(
        self,
        sid: str,
        record_id: str,
        offset: int = 0,
        limit: int = 65536,
        run_id: str | None = None,
        instance_id: str | None = None,
    ) -> RecordPage:
        """Read a source record back by id, paged by character offset (R11.8: sources
        stay readable after any number of compactions). Scoped to its session."""
        if offset < 0 or not 0 < limit <= MAX_READ:
            raise InvalidRequest("offset must be >= 0 and limit in 1..1048576")
        if bool(run_id) != bool(instance_id):
            raise InvalidRequest("a read on behalf of a thread names both run_id and instance_id")
        if run_id and instance_id:
            await self.check_grant(sid, run_id, instance_id, record_id)
        r = await self.records.read(sid, record_id)
        if r is None:
            raise NotFound(f"record {record_id} not found in session {sid}")
        if not run_id and r.visibility not in SHARED:
            # R13/R15.4: as for a thread's read, an instance- or private-scoped record is
            # its own thread's; a read on behalf of no thread is not that thread.
            raise NotGranted(
                f"record {record_id} is {r.visibility}-scoped to its thread: read it on"
                " behalf of that thread (run_id and instance_id)",
                record_id=record_id,
                visibility=r.visibility,
            )
        page = _page(r, offset, limit)
        if self.notes is not None:
            scope = (sid, run_id or "", instance_id or "")
            self.notes.readback(scope, record_id, offset, len(page.content))
        return page

    async def check_grant(self, sid: str, run_id: str, instance_id: str, record_id: str) -> None:
        """R13.2: a child thread reads its own records and what its parent exported to
        it — nothing else of the parent's, whatever ids it learns."""
        snap = await self.views.snapshot(sid, run_id)
        scope = await self.records.scope(sid, record_id)
        own = scope is not None and (scope.run_id, scope.instance_id) == (run_id, instance_id)
        if instance_id == snap.main_instance_id:
            # A main thread reads what the session shares plus its own records: another
            # thread's instance- or private-scoped records stay out, whatever the id.
            if scope is None or scope.visibility in SHARED or own:
                return
            raise NotGranted(
                f"record {record_id} is {scope.visibility}-scoped to another thread",
                record_id=record_id,
                instance_id=instance_id,
            )
        if own or record_id in await self.records.transfer(sid, run_id, instance_id):
            return
        raise NotGranted(
            f"record {record_id} is outside the transfer of child {instance_id}",
            record_id=record_id,
            instance_id=instance_id,
        )

    async def grant(self, sid: str, who: Principal, actor_id: str) -> Grant:
        """Let another actor read this session (R3.3): only its owner, or the host acting
        for it, grants; who granted is derived from the credential (idempotent)."""
        scope = await self.access.authorize(sid, who, Action.SESSION_GRANT)
        sid, by = scope.session_id, granted_by(who, scope)  # the global id
        await self.sessions.add_grant(sid, actor_id, by, who.key_id)
        self.access.granted(sid, actor_id)
        return Grant(session_id=sid, actor_id=actor_id, granted=True, granted_by=by)

    async def revoke(self, sid: str, who: Principal, actor_id: str) -> GrantRevoked:
        """Take a grant back: whoever may grant — the owner, or the host acting
        as itself or for it — revokes; anyone else is refused before any grant is looked
        up (403, or 404 from another space), so a refusal tells nothing about grants.
        Idempotent: ``revoked`` says whether there was one. Every instance stops honouring
        it within its cache's TTL (``Access.key_cache_s``); this one at once."""
        scope = await self.access.authorize(sid, who, Action.SESSION_GRANT)
        sid, by = scope.session_id, granted_by(who, scope)
        revoked = await self.sessions.revoke_grant(sid, actor_id, by, who.key_id)
        self.access.revoked(sid, actor_id)
        return GrantRevoked(session_id=sid, actor_id=actor_id, revoked=revoked, revoked_by=by)


def _page(r: StoredRecord, offset: int, limit: int) -> RecordPage:
    # R15.3: a revoked resource's content is withdrawn here too, not only in views.
    text = f"[withdrawn: resource {r.resource_ref} was revoked]" if r.revoked else r.text or ""
    return RecordPage(
        record_id=r.record_id,
        session_sequence=r.session_sequence,
        run_id=r.run_id,
        instance_id=r.instance_id,
        kind=r.kind,
        authority=r.authority,
        payload=r.payload,
        content_sha256=r.content_sha256,
        content=text[offset : offset + limit],
        offset=offset,
        total_chars=len(text),
        next_offset=offset + limit if offset + limit < len(text) else None,
        # A retracted record is out of every view but stays readable by id.
        retracted=r.retracted_by is not None,
        retracted_by=r.retracted_by,
    )
