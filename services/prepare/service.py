"""Prepare service use cases: releases, sessions, run start, prepare, blobs, outcomes.

Prepare is a reader of session state: it never writes records, runs or counters itself.
A run start is an event published to the session's partition; the session processor
(the single writer) accepts or refuses it, and Prepare reports what it decided.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from domain.assemble import Assembled, Material, assemble
from domain.budget import (
    BudgetReport,
    Calibration,
    ModelProfile,
    calibrate,
    counting_label,
    enforce,
)
from domain.gate import check_manifest, check_tool_groups, gate
from domain.planning import RunState, lifecycle_key
from domain.policy import ContextPolicy, validate_policy
from domain.providers import render as render_provider
from domain.rendering import ThreadRenderer
from domain.selection import build_groups, select_prefix
from domain.tokens import CachedCounter
from domain.triggers import CompactionState, Counters, Observation, evaluate_triggers
from schemas.auth import (
    Action,
    Principal,
    SessionScope,
    acting,
    authorize,
    authorize_release,
    grant_to_check,
    granted_by,
    key_id_of,
    verify,
)
from schemas.contracts import (
    Authority,
    Content,
    ContextEvent,
    RecordKind,
    RunLifecyclePayload,
    Scope,
    Source,
)
from schemas.errors import (
    Conflict,
    ContextBudgetExceeded,
    InvalidRequest,
    NotFound,
    NotGranted,
    ReleaseConflict,
    RunActive,
    RunNotActive,
    Unauthenticated,
)
from schemas.validation import run_start_problem, validate_event
from schemas.wire import (
    BudgetObservation,
    ControlEvent,
    ObservabilityEvent,
    encode_observability,
)
from services.bus import EventProducer
from services.prepare.prepare_hooks import HookRegistry, ModelCall, PrepareRequest
from services.prepare.views import Snapshot, SummaryView, ThreadViews
from services.prepare.waiter import CommitWaiter
from storage import compaction as repo
from storage.api_keys import StoredKey, find_key
from storage.threads import child_transfer

# R10.3: offered to the model when something was externalized; the runtime executes it with
# ``ContextClient.read_content`` (scope-checked, paged).
READ_CONTENT_TOOL: dict[str, Any] = {
    "name": "read_content",
    "description": "Read part of a result that was shown truncated. ref is the reference"
    " given in the truncation note; offset and limit are in characters.",
    "parameters": {
        "type": "object",
        "properties": {
            "ref": {"type": "string"},
            "offset": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1, "maximum": 65536},
        },
        "required": ["ref"],
    },
}


@dataclass
class PreparedEntry:
    """A prepared context held for the gateway's final check (R10.5). Held in memory: a
    call for one this process no longer holds gets ``prepared_not_found`` — prepare again."""

    prepared_id: str
    session_id: str
    run_id: str
    instance_id: str
    purpose: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    built: Assembled
    profile: ModelProfile
    soft_ratio: float | None
    reprepare_of: str | None
    dependency_versions: dict[str, Any]


def policy_revision(policy: dict[str, Any]) -> str:
    canon = json.dumps(policy, sort_keys=True, separators=(",", ":"))
    return "pol_" + hashlib.sha256(canon.encode()).hexdigest()[:16]


# Every field a release freezes (R1.4, R17): one differing field is another release.
RELEASE_CONTENT = (
    "agent_id",
    "instructions",
    "tool_catalog",
    "skill_bindings",
    "hook_bindings",
    "model_profile",
    "context_policy",
)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def release_content_hash(content: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a release's content fields."""
    return hashlib.sha256(_canonical({k: content[k] for k in RELEASE_CONTENT}).encode()).hexdigest()


@dataclass
class PrepareService:
    pool: asyncpg.Pool
    producer: EventProducer
    waiter: CommitWaiter
    views: ThreadViews
    counter: CachedCounter
    commit_wait_s: float
    compaction_wait_s: float = 20.0
    topic_observability: str | None = None
    host_id: str = "prepare"
    # Releases are frozen and a session's release never changes (R1.4): both are cached
    # for the life of the process, which takes two queries off every prepare.
    _releases: dict[str, dict[str, Any]] = field(default_factory=dict)
    _session_release: dict[str, str] = field(default_factory=dict)
    _policies: dict[str, ContextPolicy] = field(default_factory=dict)
    _summaries: dict[str, SummaryView] = field(default_factory=dict)
    _summary_rows: dict[str, Any] = field(default_factory=dict)
    _compatible: dict[tuple[str, str], bool] = field(default_factory=dict)
    _scopes: dict[str, SessionScope] = field(default_factory=dict)
    _grants: set[tuple[str, str]] = field(default_factory=set)
    # Verified keys are looked up again after this long: a revoked key stops working
    # within it, and a prepare does not pay a query for its key.
    key_cache_s: float = 10.0
    _keys: dict[str, tuple[float, StoredKey]] = field(default_factory=dict)
    _background: set[asyncio.Task[None]] = field(default_factory=set)
    hooks: HookRegistry = field(default_factory=HookRegistry)
    # Each entry holds its message list (pointers to shared message dicts): bounded.
    prepared_capacity: int = 256
    _prepared: OrderedDict[str, PreparedEntry] = field(default_factory=OrderedDict)
    _calibration: dict[str, Calibration] = field(default_factory=dict)

    # --- releases (R1.4, R17) -----------------------------------------------------------

    async def register_release(
        self, body: dict[str, Any], space_id: str | None = None
    ) -> dict[str, Any]:
        """``space_id``: the publishing key's space, which owns the release (R15.4)."""
        profile = ModelProfile.from_dict(body["model_profile"])  # validates R6.1/R6.5
        counting_label(profile.counting, self.counter.method)  # R6.4: refused at publish
        # R7.7/R17: validated and frozen at publish; stored with every default made
        # explicit so that a later change of platform defaults never alters it.
        policy = validate_policy(body.get("context_policy")).to_dict()
        rev = policy_revision({"policy": policy, "model_profile": body["model_profile"]})
        content = {
            "agent_id": body["agent_id"],
            "instructions": body["instructions"],
            "tool_catalog": body.get("tool_catalog") or [],
            "skill_bindings": body.get("skill_bindings") or [],
            "hook_bindings": body.get("hook_bindings") or [],
            "model_profile": body["model_profile"],
            "context_policy": policy,
        }
        digest = release_content_hash(content)
        release_id = body.get("release_id") or f"rel_{uuid.uuid4().hex[:12]}"
        row = await self.pool.fetchrow(
            "INSERT INTO releases (release_id, agent_id, instructions, tool_catalog,"
            " skill_bindings, hook_bindings, model_profile, context_policy, policy_revision,"
            " content_hash, space_id) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)"
            " ON CONFLICT (release_id) DO NOTHING RETURNING release_id",
            release_id,
            *(content[k] for k in RELEASE_CONTENT),
            rev,
            digest,
            space_id,
        )
        if row is None:
            # The id exists: the same content is the same release (a retry, answered
            # alike); any other content is refused, never applied to sessions in flight.
            existing = await self.release(release_id)
            if existing.get("space_id") not in (None, space_id):
                # Ids are global: another space's release is named by nothing but "taken".
                raise ReleaseConflict(
                    f"release id {release_id} is taken; publish under another id",
                    release_id=release_id,
                )
            if (existing["content_hash"] or release_content_hash(existing)) != digest:
                differ = [
                    k for k in RELEASE_CONTENT if _canonical(existing[k]) != _canonical(content[k])
                ]
                raise ReleaseConflict(
                    f"release {release_id} is frozen with other content"
                    f" ({', '.join(differ) or 'content hash'} differ); publish a new release id",
                    release_id=release_id,
                    fields=differ,
                )
            if existing["content_hash"] is None:  # published before migration 006
                await self.pool.execute(
                    "UPDATE releases SET content_hash=$2 WHERE release_id=$1"
                    " AND content_hash IS NULL",
                    release_id,
                    digest,
                )
        return {
            "release_id": release_id,
            "policy_revision": rev,
            "content_hash": digest,
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

    def _policy(self, rel: dict[str, Any]) -> ContextPolicy:
        """A release's policy, validated once: releases are frozen (R17)."""
        pol = self._policies.get(rel["release_id"])
        if pol is None:
            pol = self._policies[rel["release_id"]] = validate_policy(rel["context_policy"])
        return pol

    async def session_release(self, sid: str) -> dict[str, Any]:
        release_id = self._session_release.get(sid)
        if release_id is None:
            release_id = (await self.session(sid))["release_id"]
            self._session_release[sid] = release_id
        return await self.release(release_id)

    # --- sessions and runs (R1) ---------------------------------------------------------

    async def open_session(self, body: dict[str, Any]) -> dict[str, Any]:
        """``space_id`` and ``actor_id`` are the caller's, checked by the API against its
        credential (``auth.session_owner``); the release must be visible in that space."""
        sid = body.get("session_id") or f"ses_{uuid.uuid4().hex[:16]}"
        rel = await self.release(body["release_id"])
        if rel.get("space_id") not in (None, body["space_id"]):
            raise NotFound(f"release {body['release_id']} not found")
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
        # Refused here, before anything is published: the processor would dead-letter it.
        problem = run_start_problem(body.get("run_id"), body.get("instance_id"))
        if problem is not None:
            raise InvalidRequest(problem)
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
        await self._raise_if_refused(sid, event_key)
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

    async def resume_run(self, sid: str, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """R1.2: continue an earlier run — same run_id, thread and snapshot. The processor
        decides, as for a start: refused with ``run_active`` while another run is active."""
        return await self._run_lifecycle(sid, run_id, RecordKind.RUN_RESUMED, body)

    async def finish_run(self, sid: str, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """End the run (``cancelled``: stopped by the user); refused with
        ``run_not_active`` when it already ended otherwise."""
        kind = RecordKind.RUN_CANCELLED if body.get("cancelled") else RecordKind.RUN_FINISHED
        return await self._run_lifecycle(sid, run_id, kind, body)

    async def _run_lifecycle(
        self, sid: str, run_id: str, kind: RecordKind, body: dict[str, Any]
    ) -> dict[str, Any]:
        # The caller's earlier appends first: the key derives from the counters they leave
        # (a resume the caller appended itself, say).
        after = {int(k): int(v) for k, v in (body.get("after") or {}).items()}
        await self.waiter.wait(after, self.commit_wait_s)
        s = await self.session(sid)
        row = await self.pool.fetchrow(
            "SELECT main_instance_id, status, resumes, ends, refused_resumes FROM runs"
            " WHERE session_id=$1 AND run_id=$2",
            sid,
            run_id,
        )
        if row is None:
            raise NotFound(f"run {run_id} of session {sid} not found")
        run = RunState(run_id, **dict(row))
        # Durable counters, not a client's memory: a restarted runtime's next resume gets
        # a new key, a retry of the same one the same key (a duplicate, answered alike).
        event_key = body.get("event_key") or lifecycle_key(kind, run)
        ev = ContextEvent(
            event_id=str(uuid.uuid4()),
            event_key=event_key,
            scope=Scope(s["space_id"], s["actor_id"], sid, run_id, run.main_instance_id),
            kind=kind,
            authority=Authority.HOST,
            source=Source("prepare", self.host_id, int(time.time() * 1000)),
            content=Content.text(""),
            payload=RunLifecyclePayload(reason=body.get("reason")),
        )
        validate_event(ev)  # a key the processor would dead-letter unseen is refused here
        part, off = await self.producer.send(ev)
        await self.waiter.wait({part: off}, self.commit_wait_s)
        await self._raise_if_refused(sid, event_key)
        status = await self.pool.fetchval(
            "SELECT status FROM runs WHERE session_id=$1 AND run_id=$2", sid, run_id
        )
        return {
            "session_id": sid,
            "run_id": run_id,
            "instance_id": run.main_instance_id,
            "status": status,
            "event_key": event_key,
            "partition": part,
            "offset": off,
        }

    async def _raise_if_refused(self, sid: str, event_key: str) -> None:
        """Report the processor's refusal of a committed lifecycle event (the outcome of
        its first delivery: a duplicate is answered like the original)."""
        o = await self.pool.fetchrow(
            "SELECT code, message FROM event_outcomes WHERE session_id=$1 AND event_key=$2",
            sid,
            event_key,
        )
        if o is None:
            return
        if o["code"] == "run_active":
            raise RunActive(o["message"], session_id=sid)
        if o["code"] == "run_not_active":
            raise RunNotActive(o["message"], session_id=sid)
        raise Conflict(o["message"], reason=o["code"])

    # --- prepare (R4, R6) ---------------------------------------------------------------

    async def prepare(self, sid: str, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        purpose = body.get("purpose", "action")
        if purpose == "verification":
            purpose = "completion"  # R4.1: both names accepted
        if purpose not in ("action", "compaction", "completion"):
            raise InvalidRequest(f"unknown purpose {purpose!r}")
        reserve = int(body.get("reserve_tokens") or 0)
        reprepare_of = body.get("reprepare_of")
        if reserve < 0:
            raise InvalidRequest("reserve_tokens must be >= 0", field="reserve_tokens")
        try:
            material = tuple(Material.from_dict(m) for m in body.get("material") or ())
        except (KeyError, TypeError) as exc:
            raise InvalidRequest(
                "material items need citation_id and text", field="material"
            ) from exc
        after = {int(k): int(v) for k, v in (body.get("after") or {}).items()}
        await self.waiter.wait(after, self.commit_wait_s)
        waited = time.perf_counter() - t0
        rel = await self.session_release(sid)
        profile = ModelProfile.from_dict(body.get("model_profile") or rel["model_profile"])
        asked = body.get("tool_catalog")
        catalog: list[dict[str, Any]] = rel["tool_catalog"] if asked is None else asked
        if purpose == "compaction":
            catalog = []  # R11.3: a compaction call gets no tools (and pays for no schemas)
        async with self.pool.acquire() as conn:
            main_instance = (await self.views.snapshot(conn, sid, run_id)).main_instance_id
        instance_id = body.get("instance_id") or main_instance
        if self.hooks.hooks:
            material = await self.hooks.prepare_before(
                PrepareRequest(sid, run_id, instance_id, purpose, material)
            )
        # Child threads (R13) have their own view and no share in the run's compaction
        # lineage: no session summary, no trigger checks on the parent's counters.
        is_child = instance_id != main_instance
        compaction = (
            await self._child_compaction(sid, run_id, instance_id)
            if is_child
            else await self._compaction(sid, run_id)
        )
        summary = await self._summary(compaction["current_summary_id"] if compaction else None)

        async def build() -> tuple[ThreadRenderer, Snapshot, Assembled, list[dict[str, Any]]]:
            return await self._assemble(
                sid,
                run_id,
                instance_id,
                rel,
                profile,
                catalog,
                summary,
                compaction["revocations"] if compaction else "",
                material,
                reserve,
                purpose != "compaction",
            )

        rend, snap, built, tools = await build()
        report = built.report
        job_status = None
        if purpose == "action":
            # R9.1: checked at every action prepare; the processor (state owner) decides
            # and records the report; we only decide whether this call must wait.
            fired, obs_key = await self._observe(
                sid, run_id, instance_id, rel, rend, report, compaction, summary
            )
            over = report.calibrated_input > report.input_budget
            # R9.7: over the hard budget nothing is sent — wait (bounded) for the job. A
            # re-prepare for a hook's additions (R9.8) waits too, so there is room for them.
            if fired and (over or reprepare_of) and report.required <= report.input_budget:
                job_status = await self._wait_for_compaction(sid, obs_key)
                compaction = await self._compaction(sid, run_id)
                summary = await self._summary(
                    compaction["current_summary_id"] if compaction else None
                )
                rend, snap, built, tools = await build()
                report = built.report
        over_budget = report.calibrated_input > report.input_budget
        if over_budget and job_status is not None and report.required <= report.input_budget:
            raise ContextBudgetExceeded(
                "context exceeds the input budget and compaction did not bring it under",
                reason="compaction_" + job_status["status"],
                job=job_status,
                **report.to_dict(),
            )
        self._note_budget(sid, run_id, instance_id, purpose, rel, report)
        enforce(report)
        messages = built.messages
        provider = None
        if body.get("render"):
            try:
                provider = {
                    "format": profile.provider_format,
                    "request": render_provider(messages, tools, profile.provider_format),
                }
            except ValueError as exc:
                raise InvalidRequest(str(exc), field="provider_format") from exc
        prepared_id = f"prep_{uuid.uuid4().hex[:16]}"
        deps = {
            "through_session_sequence": snap.through_session_sequence,
            "thread_last_sequence": rend.last_sequence,
            "policy_revision": rel["policy_revision"],
            "release_id": rel["release_id"],
            "summary_id": summary.summary_id if summary else None,
        }
        self._remember(
            PreparedEntry(
                prepared_id,
                sid,
                run_id,
                instance_id,
                purpose,
                messages,
                tools,
                built,
                profile,
                self._policy(rel).compaction.context_ratio,
                reprepare_of,
                deps,
            )
        )
        out = {
            "prepared_id": prepared_id,
            "provider": provider,
            "purpose": purpose,
            "session_id": sid,
            "run_id": run_id,
            "instance_id": instance_id,
            "messages": messages,
            "tools": tools,
            "budget": report.to_dict(),
            "protected_block_manifest": [p.as_dict for p in built.manifest],
            "decisions": built.decisions
            + [
                {"block_id": f"rec:{r}", "decision": "externalized", "reason": "large_result_view"}
                for r in rend.externalized
            ]
            + (
                [
                    {
                        "block_id": f"summary:{summary.summary_id}",
                        "decision": "summarized",
                        "reason": "covered_by_summary",
                        "records": len(summary.covered),
                    }
                ]
                if summary
                else []
            ),
            "read_content_tool": READ_CONTENT_TOOL if rend.externalized else None,
            "reprepare_of": reprepare_of,
            "dependency_versions": deps,
            "inherited": {"through_session_sequence": snap.through_session_sequence},
            "record_count": rend.record_count,
            "timing": {
                "commit_wait_ms": round(waited * 1000, 3),
                "assemble_ms": round((time.perf_counter() - t0 - waited) * 1000, 3),
            },
        }
        if self.hooks.hooks:
            await self.hooks.prepare_after(
                {k: out[k] for k in ("prepared_id", "purpose", "budget", "decisions")}
            )
        return out

    def _remember(self, entry: PreparedEntry) -> None:
        self._prepared[entry.prepared_id] = entry
        while len(self._prepared) > self.prepared_capacity:
            self._prepared.popitem(last=False)

    async def _assemble(
        self,
        sid: str,
        run_id: str,
        instance_id: str,
        rel: dict[str, Any],
        profile: ModelProfile,
        tools: list[dict[str, Any]],
        summary: SummaryView | None,
        epoch: str = "",
        material: tuple[Material, ...] = (),
        reserve_tokens: int = 0,
        offer_read_content: bool = True,
    ) -> tuple[ThreadRenderer, Snapshot, Assembled, list[dict[str, Any]]]:
        large = self._policy(rel).large_result
        rend, snap = await self.views.view(
            sid, run_id, instance_id, profile.message_overhead, summary, epoch, large
        )
        pending = rend.pending_calls()
        if pending:
            raise Conflict(
                "tool calls of this thread still wait for results",
                reason="tool_results_pending",
                call_ids=pending,
            )
        if (
            offer_read_content
            and rend.externalized
            and all(t.get("name") != READ_CONTENT_TOOL["name"] for t in tools)
        ):
            # R10.3: views point at read_content, so the model is offered it (and its
            # schema is counted like every other tool's).
            tools = [*tools, READ_CONTENT_TOOL]
        built = assemble(
            profile=profile,
            counting_method=counting_label(profile.counting, self.counter.method),
            count=self._count,
            instructions=rel["instructions"],
            skill_bindings=rel["skill_bindings"],
            tools=tools,
            thread=rend,
            material=material,
            reserve_tokens=reserve_tokens,
            calibration=self._calibration.get(profile.name),
        )
        return rend, snap, built, tools

    async def _compaction(self, sid: str, run_id: str) -> dict[str, Any]:
        """This run's compaction view (R2.7): the newest summary its view may reuse, the
        counters of its view and that summary's baseline, and any job in flight.

        One round trip in the common case: summary rows and "may run R reuse summary S"
        are immutable facts and cached; only a resumed old run counts record by record."""
        async with self.pool.acquire() as conn:
            snap = await self.views.snapshot(conn, sid, run_id)
            through = snap.through_session_sequence
            r = await conn.fetchrow(
                "SELECT s.user_turns, s.model_steps, c.current_summary_id, c.active_job_id,"
                " EXISTS (SELECT 1 FROM runs x WHERE x.session_id = s.session_id"
                "   AND x.started_sequence > $2 AND x.run_id <> $3) AS later,"
                " (SELECT count(*) || ':' || coalesce(max(v.revoked_sequence), 0)"
                "  FROM revoked_resources v WHERE v.session_id = s.session_id) AS revocations"
                " FROM sessions s LEFT JOIN compaction_state c"
                " ON c.session_id = s.session_id AND c.lineage = 'main'"
                " WHERE s.session_id = $1",
                sid,
                through,
                run_id,
            )
            if r is None:
                raise NotFound(f"session {sid} not found")
            totals = (
                await repo.view_counters(conn, sid, run_id, through)
                if r["later"]
                else Counters(r["user_turns"], r["model_steps"])
            )
            summary = await self._effective(conn, sid, run_id, through, r["current_summary_id"])
        base = repo.summary_baseline(summary)
        return {
            "current_summary_id": summary["summary_id"] if summary else None,
            "user_turns": totals.user_turns,
            "model_steps": totals.model_steps,
            "baseline_user_turns": base.user_turns,
            "baseline_model_steps": base.model_steps,
            "active_job_id": r["active_job_id"],
            "revocations": r["revocations"],
        }

    async def _child_compaction(self, sid: str, run_id: str, instance_id: str) -> dict[str, Any]:
        """A child thread's own lineage (R13.1): its counters, its summary, its job."""
        async with self.pool.acquire() as conn:
            totals = await repo.child_counters(conn, sid, run_id, instance_id)
            summary = await repo.lineage_summary(conn, sid, instance_id)
            active = await conn.fetchval(
                "SELECT active_job_id FROM compaction_state WHERE session_id=$1 AND lineage=$2",
                sid,
                instance_id,
            )
            epoch = await repo.revocation_epoch(conn, sid)
        base = repo.summary_baseline(summary)
        return {
            "current_summary_id": summary["summary_id"] if summary else None,
            "user_turns": totals.user_turns,
            "model_steps": totals.model_steps,
            "baseline_user_turns": base.user_turns,
            "baseline_model_steps": base.model_steps,
            "active_job_id": active,
            "revocations": epoch,
        }

    async def _effective(
        self, conn: asyncpg.Connection, sid: str, run_id: str, through: int, summary_id: str | None
    ) -> Any:
        while summary_id is not None:
            row = self._summary_rows.get(summary_id)
            if row is None:
                row = await repo.current_summary(conn, summary_id)
                if row is None:
                    return None
                self._summary_rows[summary_id] = row
            key = (summary_id, run_id)
            ok = self._compatible.get(key)
            if ok is None:
                ok = await repo.compatible(conn, row, sid, run_id, through)
                self._compatible[key] = ok
            if ok:
                return row
            summary_id = row["parent_summary_id"]
        return None

    async def _summary(self, summary_id: str | None) -> SummaryView | None:
        if summary_id is None:
            return None
        cached = self._summaries.get(summary_id)
        if cached is None:
            r = await self.pool.fetchrow(
                "SELECT summary_text, summary_tokens, covered_record_ids FROM"
                " summary_revisions WHERE summary_id=$1",
                summary_id,
            )
            if r is None:
                return None
            cached = SummaryView(
                summary_id,
                r["summary_text"],
                r["summary_tokens"],
                frozenset(r["covered_record_ids"]),
            )
            self._summaries[summary_id] = cached  # revisions are immutable
        return cached

    async def _observe(
        self,
        sid: str,
        run_id: str,
        instance_id: str,
        rel: dict[str, Any],
        rend: ThreadRenderer,
        report: BudgetReport,
        compaction: dict[str, Any] | None,
        summary: SummaryView | None,
    ) -> tuple[bool, str]:
        policy = self._policy(rel).compaction
        c = compaction or {}
        state = CompactionState(
            totals=Counters(c.get("user_turns") or 0, c.get("model_steps") or 0),
            baseline=Counters(
                c.get("baseline_user_turns") or 0, c.get("baseline_model_steps") or 0
            ),
        )
        fingerprint = hashlib.sha256(
            json.dumps(
                [
                    rend.last_sequence,
                    summary.summary_id if summary else None,
                    rel["policy_revision"],
                    report.input_budget,
                    report.required,
                ]
            ).encode()
        ).hexdigest()[:32]
        probe = Observation(
            report.estimated_input, report.input_budget, report.required, 1, fingerprint
        )
        fired = bool(evaluate_triggers(state, policy, probe).fired)
        compressible = 0
        if fired:  # selection is O(history): only when something fired
            keep = self._policy(rel).recent_complete_groups
            compressible = select_prefix(build_groups(rend.records), keep).compressible_tokens
        fixed = sum(report.items.get(k, 0) for k in ("instructions", "skills", "tool_schemas"))
        key = f"obs:{uuid.uuid4().hex}"
        await self.producer.send_control(
            ControlEvent(
                key,
                sid,
                run_id,
                instance_id,
                int(time.time() * 1000),
                BudgetObservation(
                    report.estimated_input,
                    report.input_budget,
                    report.required,
                    fixed,
                    compressible,
                    rend.last_sequence,
                    summary.summary_id if summary else None,
                    fingerprint,
                    rel["policy_revision"],
                ),
            )
        )
        return fired or bool(c.get("active_job_id")), key

    async def _wait_for_compaction(self, sid: str, obs_key: str) -> dict[str, Any]:
        """Until the processor checked our observation and the job it started (or the one
        in flight) finished: committed, failed or rejected."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.compaction_wait_s
        while loop.time() < deadline:
            rep = await self.pool.fetchrow(
                "SELECT decision, reason, job_id FROM trigger_reports WHERE session_id=$1"
                " AND event_key=$2",
                sid,
                obs_key,
            )
            if rep is not None:
                if rep["job_id"] is None:
                    return {"status": rep["decision"], "reason": rep["reason"]}
                job = await self.pool.fetchrow(
                    "SELECT status, stage, reason FROM compaction_jobs WHERE job_id=$1",
                    rep["job_id"],
                )
                if job is not None and job["status"] != "requested":
                    return dict(job) | {"job_id": rep["job_id"]}
            await self.waiter.changed(0.1)
        return {"status": "timeout", "reason": f"no commit within {self.compaction_wait_s}s"}

    def _note_budget(
        self,
        sid: str,
        run_id: str,
        instance_id: str,
        purpose: str,
        rel: dict[str, Any],
        report: BudgetReport,
    ) -> None:
        """R18: per purpose, the input estimate and its itemized shares — no content."""
        if not self.topic_observability:
            return
        ev = ObservabilityEvent(
            "prepare_budget",
            sid,
            run_id,
            instance_id,
            int(time.time() * 1000),
            rel["policy_revision"],
            purpose=purpose,
            budget_items=dict(report.items),
            input_budget=report.input_budget,
            estimated_input=report.estimated_input,
            counting_method=report.counting_method,
        )
        self._publish_observability(sid, ev)

    def _publish_observability(self, sid: str, ev: ObservabilityEvent) -> None:
        if not self.topic_observability:
            return
        task = asyncio.get_running_loop().create_task(
            self.producer.send_nowait(
                self.topic_observability, sid.encode(), encode_observability(ev)
            )
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _count(self, text: str) -> int:
        return self.counter.count_keyed(hashlib.sha256(text.encode()).hexdigest(), text)

    # --- model gateway (R9.8, R10.5, R14, R15.1) ----------------------------------------

    async def model_call(self, sid: str, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """The gateway's final check before a model call: ``model.chat.before`` hooks, the
        protected manifest, the same BudgetPolicy, then the model call record. Returns the
        provider-ready request to send. Idempotent per prepared context: a retry returns
        the same call."""
        prepared_id = str(body.get("prepared_id") or "")
        existing = await self.pool.fetchrow(
            "SELECT call_id, status, final_input_sha256, budget, hook_versions"
            " FROM model_calls WHERE prepared_id=$1 AND session_id=$2 AND run_id=$3",
            prepared_id,
            sid,
            run_id,
        )
        if existing is not None:
            request = json.loads(
                await self.pool.fetchval(
                    "SELECT convert_from(content, 'UTF8') FROM blobs WHERE sha256=$1",
                    existing["final_input_sha256"],
                )
            )
            return {
                "call_id": existing["call_id"],
                "prepared_id": prepared_id,
                "status": existing["status"],
                "request": request,
                "budget": existing["budget"],
                "hook_versions": existing["hook_versions"],
                "idempotent_replay": True,
            }
        p = self._prepared.get(prepared_id)
        if p is None or p.session_id != sid or p.run_id != run_id:
            raise NotFound(
                f"prepared context {prepared_id} is not held here; prepare again",
                reason="prepared_not_found",
                prepared_id=prepared_id,
            )
        call = ModelCall(
            sid,
            run_id,
            p.instance_id,
            prepared_id,
            p.purpose,
            tuple(p.tools),
            p.built.report.to_dict(),
        )
        messages, added, removed, used = await self.hooks.model_before(
            call, list(p.messages), p.built.manifest, self._count, p.profile.message_overhead
        )
        check_manifest(messages, p.built.manifest)
        check_tool_groups(messages)
        # Room reserved for the hooks at a re-prepare is what they now fill: not counted twice.
        report = p.built.report
        reserved = report.items.get("reserved", 0)
        factor = max(1.0, report.calibration.factor) if report.calibration else 1.0
        decision = gate(
            estimated_before=math.ceil((report.estimated_input - reserved) * factor),
            added=added,
            removed=removed,
            input_budget=p.built.report.input_budget,
            soft_ratio=p.soft_ratio,
            reprepared=p.reprepare_of is not None,
            details={"prepared_id": prepared_id, "hooks": used},
        )
        request = render_provider(messages, p.tools, p.profile.provider_format)
        final = json.dumps(request, sort_keys=True, separators=(",", ":")).encode()
        blob = await self.put_blob(
            final, "application/json", (decision.estimated_input, "gateway_final_estimate")
        )
        raw = report.estimated_input - reserved + decision.hook_tokens
        budget = p.built.report.to_dict() | {
            "final_estimated_input": decision.estimated_input,
            "final_estimated_input_raw": raw,  # before calibration: what calibration compares
            "hook_tokens": decision.hook_tokens,
            "soft_limit": decision.soft_limit,
        }
        call_id = f"mc_{prepared_id.removeprefix('prep_')}"
        model_config = dict(body.get("model_config") or {}) | {
            "model": p.profile.name,
            "provider_format": p.profile.provider_format,
        }
        inserted = await self.pool.fetchval(
            "INSERT INTO model_calls (call_id, prepared_id, session_id, run_id, instance_id,"
            " purpose, status, model, final_input_sha256, tool_catalog_version, model_config,"
            " dependency_versions, manifest, budget, hook_versions)"
            " VALUES ($1,$2,$3,$4,$5,$6,'ready',$7,$8,$9,$10,$11,$12,$13,$14)"
            " ON CONFLICT (prepared_id) DO NOTHING RETURNING call_id",
            call_id,
            prepared_id,
            sid,
            run_id,
            p.instance_id,
            p.purpose,
            p.profile.name,
            blob["sha256"],
            p.built.tool_schema_sha256,
            model_config,
            p.dependency_versions,
            [b.to_dict() for b in p.built.manifest],
            budget,
            used,
        )
        if inserted is None:  # a concurrent check of the same context won: send its input
            return await self.model_call(sid, run_id, body)
        return {
            "call_id": call_id,
            "prepared_id": prepared_id,
            "status": "ready",
            "request": request,
            "budget": budget,
            "hook_versions": used,
            "idempotent_replay": False,
        }

    async def model_result(self, sid: str, call_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """The runtime reports the response: ``model.chat.after`` (read-only), the response
        reference and the provider's usage, which calibrates later estimates (R6.4)."""
        row = await self.pool.fetchrow(
            "SELECT session_id, run_id, instance_id, prepared_id, purpose, model, budget,"
            " status, drift, dependency_versions FROM model_calls WHERE call_id=$1"
            " AND session_id=$2",
            call_id,
            sid,
        )
        if row is None:
            raise NotFound(f"model call {call_id} not found")
        if row["status"] == "completed":
            return {"call_id": call_id, "status": "completed", "drift": row["drift"]}
        response = body.get("response") or {}
        blob = await self.put_blob(
            json.dumps(response, sort_keys=True, separators=(",", ":")).encode(),
            "application/json",
        )
        usage = dict(body.get("usage") or {})
        # Claim the call first: of concurrent reports exactly one calibrates and runs the
        # after-hooks; the others read what it stored.
        claimed = await self.pool.fetchval(
            "UPDATE model_calls SET status='completed', response_sha256=$2, usage=$3,"
            " completed_at=now() WHERE call_id=$1 AND status='ready' RETURNING call_id",
            call_id,
            blob["sha256"],
            usage,
        )
        if claimed is None:
            stored = await self.pool.fetchval(
                "SELECT drift FROM model_calls WHERE call_id=$1", call_id
            )
            return {"call_id": call_id, "status": "completed", "drift": stored}
        estimated = int(row["budget"].get("final_estimated_input_raw") or 0)
        drift = None
        actual = usage.get("input_tokens")
        if isinstance(actual, int) and actual > 0 and estimated > 0:
            # One report moves the factor by at most a bounded ratio, so a wrong usage
            # figure cannot lock a model out of every session at once.
            bounded = min(max(actual, estimated // 2), estimated * 2)
            cal = calibrate(self._calibration.get(row["model"], Calibration()), estimated, bounded)
            self._calibration[row["model"]] = cal
            drift = {
                "estimated_input": estimated,
                "reported_input": actual,
                "drift_ratio": round(actual / estimated - 1.0, 6),
                "calibration": cal.to_dict(),
            }
            await self.pool.execute(
                "UPDATE model_calls SET drift=$2 WHERE call_id=$1", call_id, drift
            )
        if self.hooks.hooks:
            await self.hooks.model_after(
                ModelCall(
                    row["session_id"],
                    row["run_id"],
                    row["instance_id"],
                    row["prepared_id"],
                    row["purpose"],
                    (),
                    row["budget"],
                ),
                response,
            )
        self._note_usage(row, usage, drift)
        return {"call_id": call_id, "status": "completed", "drift": drift}

    async def load_calibration(self) -> None:
        """At start: each model's factor from its last reported calls, so a restart does not
        forget what the provider said."""
        rows = await self.pool.fetch(
            "SELECT model, (budget->>'final_estimated_input_raw')::bigint AS est,"
            " (usage->>'input_tokens')::bigint AS act FROM (SELECT *, row_number() OVER"
            " (PARTITION BY model ORDER BY completed_at DESC) AS n FROM model_calls"
            " WHERE usage ? 'input_tokens') x WHERE n <= 20 ORDER BY model, completed_at"
        )
        for r in rows:
            if r["est"] and r["act"]:
                cal = self._calibration.get(r["model"], Calibration())
                act = min(max(r["act"], r["est"] // 2), r["est"] * 2)
                self._calibration[r["model"]] = calibrate(cal, r["est"], act)

    def _note_usage(self, row: Any, usage: dict[str, Any], drift: dict[str, Any] | None) -> None:
        """R18: real usage beside the estimate, per purpose."""
        if not self.topic_observability:
            return
        ev = ObservabilityEvent(
            "model_call",
            row["session_id"],
            row["run_id"],
            row["instance_id"],
            int(time.time() * 1000),
            str(row["dependency_versions"].get("policy_revision", "")),
            purpose=row["purpose"],
            input_budget=int(row["budget"]["input_budget"]),
            estimated_input=int(row["budget"]["final_estimated_input"]),
            counting_method=str(row["budget"].get("counting_method", "")),
            budget_items={
                k: int(v) for k, v in usage.items() if isinstance(v, int) and k.endswith("tokens")
            },
        )
        self._publish_observability(row["session_id"], ev)

    # --- content store (R3.4) -----------------------------------------------------------

    async def put_blob(
        self, data: bytes, media_type: str, counted: tuple[int, str] | None = None
    ) -> dict[str, Any]:
        """``counted``: a token count the caller already has, with its method — the
        gateway's final input is its own estimate, not worth a second tokenizer pass."""
        sha = hashlib.sha256(data).hexdigest()
        if counted is not None:
            tokens, method = counted
        else:
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

    async def read_record(
        self,
        sid: str,
        record_id: str,
        offset: int = 0,
        limit: int = 65536,
        run_id: str | None = None,
        instance_id: str | None = None,
    ) -> dict[str, Any]:
        """Read a source record back by id, paged by character offset (R11.8: sources
        stay readable after any number of compactions). Scoped to its session."""
        if offset < 0 or not 0 < limit <= 1 << 20:
            raise InvalidRequest("offset must be >= 0 and limit in 1..1048576")
        if bool(run_id) != bool(instance_id):
            raise InvalidRequest("a read on behalf of a thread names both run_id and instance_id")
        if run_id and instance_id:
            await self._check_grant(sid, run_id, instance_id, record_id)
        r = await self.pool.fetchrow(
            "SELECT r.record_id, r.session_sequence, r.run_id, r.instance_id, r.kind,"
            " r.authority, r.visibility, r.payload, r.content_length, r.content_sha256,"
            " COALESCE(r.content_inline, convert_from(b.content, 'UTF8')) AS text,"
            " r.resource_ref, EXISTS (SELECT 1 FROM revoked_resources v WHERE"
            "  v.session_id = r.session_id AND v.resource_id = r.resource_ref) AS revoked"
            " FROM records r LEFT JOIN blobs b ON b.sha256 = r.content_ref"
            " WHERE r.session_id=$1 AND r.record_id=$2",
            sid,
            record_id,
        )
        if r is None:
            raise NotFound(f"record {record_id} not found in session {sid}")
        if not run_id and r["visibility"] not in ("session", "actor"):
            # R13/R15.4: as for a thread's read, an instance- or private-scoped record is
            # its own thread's; a read on behalf of no thread is not that thread.
            raise NotGranted(
                f"record {record_id} is {r['visibility']}-scoped to its thread: read it on"
                " behalf of that thread (run_id and instance_id)",
                record_id=record_id,
                visibility=r["visibility"],
            )
        # R15.3: a revoked resource's content is withdrawn here too, not only in views.
        text = (
            f"[withdrawn: resource {r['resource_ref']} was revoked]"
            if r["revoked"]
            else r["text"] or ""
        )
        out = {
            k: r[k]
            for k in (
                "record_id",
                "session_sequence",
                "run_id",
                "instance_id",
                "kind",
                "authority",
                "payload",
                "content_sha256",
            )
        }
        return out | {
            "content": text[offset : offset + limit],
            "offset": offset,
            "total_chars": len(text),
            "next_offset": offset + limit if offset + limit < len(text) else None,
        }

    async def grant(self, sid: str, who: Principal, actor_id: str) -> dict[str, Any]:
        """Let another actor read this session (R3.3): only its owner, or the host acting
        for it, grants; who granted is derived from the credential (idempotent)."""
        scope = await self.authorize(sid, who, Action.SESSION_GRANT)
        by = granted_by(who, scope)
        await self.pool.execute(
            "INSERT INTO session_grants (session_id, actor_id, granted_by, granted_by_key)"
            " VALUES ($1,$2,$3,$4) ON CONFLICT DO NOTHING",
            sid,
            actor_id,
            by,
            who.key_id,
        )
        self._grants.add((sid, actor_id))
        return {"session_id": sid, "actor_id": actor_id, "granted": True, "granted_by": by}

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
        now = time.monotonic()
        cached = self._keys.get(key_id)
        if cached is None or cached[0] < now:
            stored = await find_key(self.pool, key_id)
            if stored is None:
                self._keys.pop(key_id, None)
                raise Unauthenticated("unknown or revoked API key")
            cached = self._keys[key_id] = (now + self.key_cache_s, stored)
        if not verify(key, cached[1].digest):
            raise Unauthenticated("unknown or revoked API key")
        return acting(cached[1].credential, header_actor)

    async def authorize(self, sid: str, who: Principal, action: Action) -> SessionScope:
        """R3.3/R15.4: tenant, then ownership or a grant (``auth.authorize``). A session of
        another space answers exactly like an unknown one."""
        scope = self._scopes.get(sid)
        if scope is None:
            s = await self.session(sid)
            scope = self._scopes[sid] = SessionScope(sid, s["space_id"], s["actor_id"])
        granted = False
        actor = grant_to_check(who, scope, action)
        if actor is not None:
            granted = (sid, actor) in self._grants
            if not granted and await self.pool.fetchval(
                "SELECT 1 FROM session_grants WHERE session_id=$1 AND actor_id=$2", sid, actor
            ):
                self._grants.add((sid, actor))
                granted = True
        authorize(who, scope, action, granted).enforce()
        return scope

    async def authorized_release(self, release_id: str, who: Principal) -> dict[str, Any]:
        """A release as its space sees it: another space's is not found (R15.4)."""
        rel = await self.release(release_id)
        authorize_release(who, release_id, rel.get("space_id"), Action.RELEASE_READ).enforce()
        return rel

    async def _check_grant(self, sid: str, run_id: str, instance_id: str, record_id: str) -> None:
        """R13.2: a child thread reads its own records and what its parent exported to
        it — nothing else of the parent's, whatever ids it learns."""
        async with self.pool.acquire() as conn:
            snap = await self.views.snapshot(conn, sid, run_id)
            if instance_id == snap.main_instance_id:
                # A main thread reads what the session shares plus its own records: another
                # thread's instance- or private-scoped records stay out, whatever the id.
                r = await conn.fetchrow(
                    "SELECT visibility, run_id, instance_id FROM records"
                    " WHERE session_id=$1 AND record_id=$2",
                    sid,
                    record_id,
                )
                if (
                    r is None
                    or r["visibility"] in ("session", "actor")
                    or (r["run_id"], r["instance_id"]) == (run_id, instance_id)
                ):
                    return
                raise NotGranted(
                    f"record {record_id} is {r['visibility']}-scoped to another thread",
                    record_id=record_id,
                    instance_id=instance_id,
                )
            own = await conn.fetchval(
                "SELECT 1 FROM records WHERE session_id=$1 AND record_id=$2 AND run_id=$3"
                " AND instance_id=$4",
                sid,
                record_id,
                run_id,
                instance_id,
            )
            if own or record_id in await child_transfer(conn, sid, run_id, instance_id):
                return
        raise NotGranted(
            f"record {record_id} is outside the transfer of child {instance_id}",
            record_id=record_id,
            instance_id=instance_id,
        )

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
