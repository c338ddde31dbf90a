"""The Prepare service as the HTTP API sees it: one object over the use cases.

Each method hands its request to the use case that owns it (``services/prepare/``):
releases (``publishing``), sessions and runs (``run_lifecycle``), prepare
(``prepare_context`` with ``compaction_check``), the model gateway (``model_gateway``),
read-back and grants (``readback``), keys and permissions (``access``) and the content
store (``content``). ``bootstrap`` wires them to real adapters or to fakes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from domain.auth import Action, Principal, SessionScope
from services.prepare.access import Access
from services.prepare.content import ContentStore
from services.prepare.model_gateway import Gateway
from services.prepare.prepare_context import Preparer
from services.prepare.publishing import ReleaseBook
from services.prepare.readback import ReadBack
from services.prepare.requests import (
    FinishIn,
    ModelCallIn,
    ModelResultIn,
    PrepareIn,
    ReleaseIn,
    RunIn,
    RunLifecycleIn,
    SessionIn,
)
from services.prepare.run_lifecycle import Runs


@dataclass
class PrepareService:
    releases: ReleaseBook
    runs: Runs
    preparer: Preparer
    gateway: Gateway
    readback: ReadBack
    access: Access
    content: ContentStore
    pool: asyncpg.Pool | None = None  # for the analytics query (None in unit tests)

    # --- keys and permissions (R3.3, R15.4) ----------------------------------------------

    async def authenticate(self, key: str | None, header_actor: str | None) -> Principal:
        return await self.access.authenticate(key, header_actor)

    async def authorize(
        self, sid: str, who: Principal, action: Action, *, global_id: bool = False
    ) -> SessionScope:
        return await self.access.authorize(sid, who, action, global_id=global_id)

    # --- releases (R1.4, R17) ------------------------------------------------------------

    async def register_release(
        self, body: ReleaseIn, space_id: str | None = None
    ) -> dict[str, Any]:
        return await self.releases.register(body, space_id)

    async def authorized_release(self, release_id: str, who: Principal) -> dict[str, Any]:
        return await self.access.authorized_release(release_id, who)

    # --- sessions and runs (R1) ----------------------------------------------------------

    async def open_session(self, body: SessionIn, space_id: str, actor_id: str) -> dict[str, Any]:
        return await self.runs.open_session(body, space_id, actor_id)

    async def session(self, sid: str) -> dict[str, Any]:
        return (await self.runs.session(sid)).to_dict()

    async def start_run(self, sid: str, body: RunIn) -> dict[str, Any]:
        return await self.runs.start_run(sid, body)

    async def resume_run(self, sid: str, run_id: str, body: RunLifecycleIn) -> dict[str, Any]:
        return await self.runs.resume_run(sid, run_id, body)

    async def finish_run(self, sid: str, run_id: str, body: FinishIn) -> dict[str, Any]:
        return await self.runs.finish_run(sid, run_id, body)

    async def outcome(self, sid: str, event_key: str) -> dict[str, Any]:
        return await self.runs.outcome(sid, event_key)

    # --- prepare and the model gateway (R4, R6, R9, R10, R14) ----------------------------

    async def prepare(self, sid: str, run_id: str, body: PrepareIn) -> dict[str, Any]:
        return await self.preparer.prepare(sid, run_id, body)

    async def model_call(self, sid: str, run_id: str, body: ModelCallIn) -> dict[str, Any]:
        return await self.gateway.model_call(sid, run_id, body)

    async def model_result(self, sid: str, call_id: str, body: ModelResultIn) -> dict[str, Any]:
        return await self.gateway.model_result(sid, call_id, body)

    # --- read-back, grants and the content store (R3.3, R3.4, R11.8, R13.2) -------------

    async def read_record(
        self,
        sid: str,
        record_id: str,
        offset: int = 0,
        limit: int = 65536,
        run_id: str | None = None,
        instance_id: str | None = None,
    ) -> dict[str, Any]:
        return await self.readback.read_record(sid, record_id, offset, limit, run_id, instance_id)

    async def grant(self, sid: str, who: Principal, actor_id: str) -> dict[str, Any]:
        return await self.readback.grant(sid, who, actor_id)

    async def revoke_grant(self, sid: str, who: Principal, actor_id: str) -> dict[str, Any]:
        return await self.readback.revoke(sid, who, actor_id)

    async def put_blob(self, space_id: str, data: bytes, media_type: str) -> dict[str, Any]:
        return await self.content.put(space_id, data, media_type)
