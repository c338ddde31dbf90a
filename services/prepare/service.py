"""Prepare service use cases: releases, sessions, run start, prepare, blobs, outcomes.

Prepare is a reader of session state: it never writes records, runs or counters itself.
A run start is an event published to the session's partition; the session processor
(the single writer) accepts or refuses it, and Prepare reports what it decided.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from schemas.contracts import (
    Authority,
    Content,
    ContextEvent,
    RecordKind,
    RunLifecyclePayload,
    Scope,
    Source,
)
from schemas.errors import Conflict, InvalidRequest, NotFound, RunActive
from services.bus import EventProducer
from services.core.assembly import skills_catalog_text, tool_schema_text
from services.core.budget import ModelProfile, enforce, make_report
from services.core.policy import validate_policy
from services.core.tokens import CachedCounter
from services.prepare.views import ThreadViews
from services.prepare.waiter import CommitWaiter


def policy_revision(policy: dict[str, Any]) -> str:
    canon = json.dumps(policy, sort_keys=True, separators=(",", ":"))
    return "pol_" + hashlib.sha256(canon.encode()).hexdigest()[:16]


@dataclass
class PrepareService:
    pool: asyncpg.Pool
    producer: EventProducer
    waiter: CommitWaiter
    views: ThreadViews
    counter: CachedCounter
    commit_wait_s: float
    host_id: str = "prepare"
    # Releases are frozen and a session's release never changes (R1.4): both are cached
    # for the life of the process, which takes two queries off every prepare.
    _releases: dict[str, dict[str, Any]] = field(default_factory=dict)
    _session_release: dict[str, str] = field(default_factory=dict)

    # --- releases (R1.4, R17) -----------------------------------------------------------

    async def register_release(self, body: dict[str, Any]) -> dict[str, Any]:
        profile = ModelProfile.from_dict(body["model_profile"])  # validates R6.1/R6.5
        # R7.7/R17: validated and frozen at publish; stored with every default made
        # explicit so that a later change of platform defaults never alters it.
        policy = validate_policy(body.get("context_policy")).to_dict()
        rev = policy_revision({"policy": policy, "model_profile": body["model_profile"]})
        release_id = body.get("release_id") or f"rel_{uuid.uuid4().hex[:12]}"
        row = await self.pool.fetchrow(
            "INSERT INTO releases (release_id, agent_id, instructions, tool_catalog,"
            " skill_bindings, model_profile, context_policy, policy_revision)"
            " VALUES ($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT (release_id) DO NOTHING"
            " RETURNING release_id",
            release_id,
            body["agent_id"],
            body["instructions"],
            body.get("tool_catalog") or [],
            body.get("skill_bindings") or [],
            body["model_profile"],
            policy,
            rev,
        )
        if row is None:
            existing = await self.release(release_id)
            if (
                existing["policy_revision"] != rev
                or existing["instructions"] != body["instructions"]
            ):
                raise Conflict(f"release {release_id} is frozen with different content")
        return {
            "release_id": release_id,
            "policy_revision": rev,
            "input_budget": profile.input_budget(),
        }

    async def release(self, release_id: str) -> dict[str, Any]:
        cached = self._releases.get(release_id)
        if cached is not None:
            return cached
        r = await self.pool.fetchrow("SELECT * FROM releases WHERE release_id=$1", release_id)
        if r is None:
            raise NotFound(f"release {release_id} not found")
        rel = dict(r) | {"frozen_at": r["frozen_at"].isoformat()}
        self._releases[release_id] = rel
        return rel

    async def session_release(self, sid: str) -> dict[str, Any]:
        release_id = self._session_release.get(sid)
        if release_id is None:
            release_id = (await self.session(sid))["release_id"]
            self._session_release[sid] = release_id
        return await self.release(release_id)

    # --- sessions and runs (R1) ---------------------------------------------------------

    async def open_session(self, body: dict[str, Any]) -> dict[str, Any]:
        sid = body.get("session_id") or f"ses_{uuid.uuid4().hex[:16]}"
        await self.release(body["release_id"])
        row = await self.pool.fetchrow(
            "INSERT INTO sessions (session_id, space_id, actor_id, release_id)"
            " VALUES ($1,$2,$3,$4) ON CONFLICT (session_id) DO NOTHING RETURNING session_id",
            sid,
            body["space_id"],
            body["actor_id"],
            body["release_id"],
        )
        s = await self.session(sid)
        if row is None and (
            s["release_id"] != body["release_id"]
            or s["space_id"] != body["space_id"]
            or s["actor_id"] != body["actor_id"]
        ):
            raise Conflict(f"session {sid} exists with another release or scope (R1.4)")
        return s

    async def session(self, sid: str) -> dict[str, Any]:
        r = await self.pool.fetchrow(
            "SELECT session_id, space_id, actor_id, release_id, active_run_id, revision,"
            " user_turns, model_steps, next_session_sequence - 1 AS last_sequence"
            " FROM sessions WHERE session_id=$1",
            sid,
        )
        if r is None:
            raise NotFound(f"session {sid} not found")
        return dict(r)

    async def start_run(self, sid: str, body: dict[str, Any]) -> dict[str, Any]:
        s = await self.session(sid)
        run_id = body.get("run_id") or f"run_{uuid.uuid4().hex[:12]}"
        instance_id = body.get("instance_id") or f"{run_id}.main"
        event_key = f"run_started:{run_id}"
        ev = ContextEvent(
            event_id=str(uuid.uuid4()),
            event_key=event_key,
            scope=Scope(s["space_id"], s["actor_id"], sid, run_id, instance_id),
            kind=RecordKind.RUN_STARTED,
            authority=Authority.HOST,
            source=Source("prepare", self.host_id, int(time.time() * 1000)),
            content=Content.text(""),
            payload=RunLifecyclePayload(release_id=s["release_id"]),
        )
        part, off = await self.producer.send(ev)
        await self.waiter.wait({part: off}, self.commit_wait_s)
        outcome = await self.pool.fetchrow(
            "SELECT code, message FROM event_outcomes WHERE session_id=$1 AND event_key=$2",
            sid,
            event_key,
        )
        if outcome is not None:
            if outcome["code"] == "run_active":
                raise RunActive(outcome["message"], session_id=sid)
            raise Conflict(outcome["message"], reason=outcome["code"])
        async with self.pool.acquire() as conn:
            snap = await self.views.snapshot(conn, sid, run_id)
        return {
            "session_id": sid,
            "run_id": run_id,
            "instance_id": snap.main_instance_id,
            "status": snap.run_status,
            "snapshot": {
                "snapshot_id": snap.snapshot_id,
                "through_session_sequence": snap.through_session_sequence,
                "policy_revision": snap.policy_revision,
            },
        }

    # --- prepare (R4, R6) ---------------------------------------------------------------

    async def prepare(self, sid: str, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        purpose = body.get("purpose", "action")
        if purpose == "verification":
            purpose = "completion"  # R4.1: both names accepted
        if purpose not in ("action", "compaction", "completion"):
            raise InvalidRequest(f"unknown purpose {purpose!r}")
        after = {int(k): int(v) for k, v in (body.get("after") or {}).items()}
        await self.waiter.wait(after, self.commit_wait_s)
        waited = time.perf_counter() - t0
        rel = await self.session_release(sid)
        profile = ModelProfile.from_dict(body.get("model_profile") or rel["model_profile"])
        tools = body.get("tool_catalog")
        tools = rel["tool_catalog"] if tools is None else tools
        instance_id = body.get("instance_id")
        if not instance_id:
            async with self.pool.acquire() as conn:
                instance_id = (await self.views.snapshot(conn, sid, run_id)).main_instance_id
        rend, snap = await self.views.view(sid, run_id, instance_id, profile.message_overhead)
        pending = rend.pending_calls()
        if pending:
            raise Conflict(
                "tool calls of this thread still wait for results",
                reason="tool_results_pending",
                call_ids=pending,
            )
        instr = rel["instructions"]
        skills = skills_catalog_text(rel["skill_bindings"])
        tool_text = tool_schema_text(tools) if tools else ""
        items = {
            "instructions": self._count(instr),
            "skills": self._count(skills) if skills else 0,
            "tool_schemas": self._count(tool_text) if tool_text else 0,
        } | {k: v for k, v in rend.tokens.items()}
        items["envelope"] = items.get("envelope", 0) + profile.message_overhead
        required = (
            items["instructions"]
            + items["skills"]
            + items["tool_schemas"]
            + items.get("task", 0)
            + profile.message_overhead
        )
        report = make_report(profile, items, required, self.counter.method)
        enforce(report)
        system = instr + ("\n\n" + skills if skills else "")
        messages = [
            {
                "role": "system",
                "content": system,
                "block": "instruction",
                "category": "instructions",
                "record_ids": [],
                "tokens": 0,
            }
        ]
        messages.extend(rend.messages)
        return {
            "prepared_id": f"prep_{uuid.uuid4().hex[:16]}",
            "purpose": purpose,
            "session_id": sid,
            "run_id": run_id,
            "instance_id": instance_id,
            "messages": messages,
            "tools": tools,
            "budget": report.to_dict(),
            "dependency_versions": {
                "through_session_sequence": snap.through_session_sequence,
                "thread_last_sequence": rend.last_sequence,
                "policy_revision": rel["policy_revision"],
                "release_id": rel["release_id"],
            },
            "inherited": {"through_session_sequence": snap.through_session_sequence},
            "record_count": rend.record_count,
            "timing": {
                "commit_wait_ms": round(waited * 1000, 3),
                "assemble_ms": round((time.perf_counter() - t0 - waited) * 1000, 3),
            },
        }

    def _count(self, text: str) -> int:
        return self.counter.count_keyed(hashlib.sha256(text.encode()).hexdigest(), text)

    # --- content store (R3.4) -----------------------------------------------------------

    async def put_blob(self, data: bytes, media_type: str) -> dict[str, Any]:
        sha = hashlib.sha256(data).hexdigest()
        try:
            text = data.decode("utf-8")
            tokens, method = self._count(text), self.counter.method
        except UnicodeDecodeError:
            tokens, method = len(data), "estimate:utf8_bytes"
        await self.pool.execute(
            "INSERT INTO blobs (sha256, content, length, media_type, token_count, token_method)"
            " VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT (sha256) DO NOTHING",
            sha,
            data,
            len(data),
            media_type,
            tokens,
            method,
        )
        return {"sha256": sha, "length": len(data), "token_count": tokens, "token_method": method}

    async def outcome(self, sid: str, event_key: str) -> dict[str, Any]:
        r = await self.pool.fetchrow(
            "SELECT record_id, session_sequence, instance_sequence, kind FROM records"
            " WHERE session_id=$1 AND event_key=$2",
            sid,
            event_key,
        )
        if r is not None:
            return {"outcome": "committed"} | dict(r)
        o = await self.pool.fetchrow(
            "SELECT outcome, code, message FROM event_outcomes WHERE session_id=$1"
            " AND event_key=$2",
            sid,
            event_key,
        )
        if o is not None:
            return dict(o)
        return {"outcome": "unknown"}
