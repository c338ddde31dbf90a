"""Prepare a model call's context (R4, R6, R9, R10): assemble the thread's view within the
release's budget, check the triggers, wait (bounded) for compaction when nothing may be
sent without it, and hold the result for the gateway's final check."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from domain.context.assemble import Assembled, Material, assemble
from domain.context.providers import prompt_cache_key
from domain.context.providers import render as render_provider
from domain.context.rendering import ThreadRenderer
from domain.frontier import Frontier
from domain.window.budget import ModelProfile, counting_label, enforce
from domain.window.model_catalog import for_purpose
from schemas.answers.prepared import (
    DependencyVersions,
    FrontierState,
    Inherited,
    PreparedContext,
    ProviderRequest,
    Timing,
)
from schemas.errors import CompactionInFlight, Conflict, ContextBudgetExceeded, InvalidRequest
from services.model_profiles import model_profile
from services.prepare.assembly.answer_parts import (
    READ_CONTENT_TOOL,
    assembly_decisions,
    view_decisions,
)
from services.prepare.assembly.compaction_check import CompactionCheck, Lineage
from services.prepare.assembly.prepare_hooks import HookRegistry, PrepareRequest
from services.prepare.assembly.prepared import (
    PreparedEntry,
    PreparedStore,
    WrittenOnce,
    budget_of,
)
from services.prepare.assembly.views import Snapshot, ThreadViews
from services.prepare.assembly.waiter import Waiter
from services.prepare.bodies import PrepareIn, offsets_of
from services.prepare.calibration import CalibrationCache
from services.prepare.content import ContentStore
from services.prepare.notes import Notes
from services.prepare.publishing import ReleaseBook
from storage.compaction.read_ahead import ReadAhead
from storage.compaction.view import JobStatus
from storage.records.frontier import FrontierReads
from storage.records.thread_frontier import FrontierQuery
from storage.releases import Release


@dataclass(frozen=True)
class Target:
    """What one prepare builds: for which thread, purpose, profile, tools and material."""

    session_id: str
    run_id: str
    instance_id: str
    purpose: str
    release: Release
    skills: tuple[dict[str, Any], ...]  # the release's bindings, parsed (SkillBinding)
    profile: ModelProfile
    catalog: list[dict[str, Any]]
    material: tuple[Material, ...]
    reserve_tokens: int
    child: bool  # a child instance's thread (R13.1), not the session's main thread


@dataclass(frozen=True)
class Built:
    rend: ThreadRenderer
    snap: Snapshot
    assembled: Assembled
    tools: list[dict[str, Any]]
    frontier: Frontier


def _purpose(body: PrepareIn) -> str:
    return "completion" if body.purpose == "verification" else body.purpose  # R4.1


def profile_purpose(purpose: str, child: bool) -> str:
    """The purpose profile a call uses (R13.1, R17): a child thread's action call is the
    ``child`` purpose; every other call is its own purpose."""
    return "child" if child and purpose == "action" else purpose


def _material(body: PrepareIn) -> tuple[Material, ...]:
    try:
        return tuple(Material.from_dict(m) for m in body.material)
    except (KeyError, TypeError) as exc:
        raise InvalidRequest("material items need citation_id and text", field="material") from exc


@dataclass
class Preparer:
    releases: ReleaseBook
    views: ThreadViews
    waiter: Waiter
    compaction: CompactionCheck
    content: ContentStore
    prepared: PreparedStore
    notes: Notes
    calibration: CalibrationCache  # per model, folded in by the gateways (R6.4)
    commit_wait_s: float
    hooks: HookRegistry
    frontier: FrontierReads
    # A session's space (``Access.space_of``): whose calibration its estimates use.
    space_of: Callable[[str], Awaitable[str]]

    async def prepare(self, sid: str, run_id: str, body: PrepareIn) -> PreparedContext:
        t0 = time.perf_counter()
        material = _material(body)
        await self.waiter.wait(offsets_of(body.after), self.commit_wait_s)
        waited = time.perf_counter() - t0
        target = await self._target(sid, run_id, body, material)
        # A kept main view's new records and its compaction row, in one round trip.
        scope = (sid, run_id, target.instance_id)
        ahead = None if target.child else await self.views.ahead(scope, _query(target))
        row = ahead.view if ahead is not None else None
        lineage = await self.compaction.lineage(sid, run_id, target.instance_id, target.child, row)
        built = await self._build(target, lineage, ahead)
        job_status = None
        if target.purpose == "action":
            built, lineage, job_status = await self._check_triggers(
                target, built, lineage, body.reprepare_of
            )
        report = built.assembled.report
        over_budget = report.calibrated_input > report.input_budget
        scope = (sid, run_id, target.instance_id)
        revision = target.release.policy_revision
        try:
            if over_budget and job_status is not None and report.required <= report.input_budget:
                waiting = job_status["status"] == "timeout"
                raise (CompactionInFlight if waiting else ContextBudgetExceeded)(
                    "context exceeds the input budget and compaction did not bring it under",
                    reason="compaction_" + str(job_status["status"]),
                    job=job_status,
                    **report.to_dict(),
                )
            enforce(report)
        except ContextBudgetExceeded as exc:  # R18: over-limit refusals, by reason
            reason = str(exc.details.get("reason") or exc.code)
            self.notes.budget(scope, target.purpose, revision, report, refused=reason)
            raise
        out = await self._answer(target, built, lineage, body)
        counts = Counter(d["decision"] for d in out.decisions)
        self.notes.budget(scope, target.purpose, revision, report, counts=dict(counts))
        timing = Timing(
            commit_wait_ms=round(waited * 1000, 3),
            assemble_ms=round((time.perf_counter() - t0 - waited) * 1000, 3),
        )
        out = out.model_copy(update={"timing": timing})
        # R14: the hooks this call's release binds, never every loaded one.
        if target.release.policy.hook_bindings:
            seen = {
                "prepared_id": out.prepared_id,
                "purpose": out.purpose,
                "budget": out.budget.model_dump(exclude_unset=True),
                "decisions": out.decisions,
            }
            await self.hooks.prepare_after(seen, target.release.policy.hook_bindings)
        return out

    async def _target(
        self, sid: str, run_id: str, body: PrepareIn, material: tuple[Material, ...]
    ) -> Target:
        purpose = _purpose(body)
        # the release's parts as publishing parsed them (release_spec); an
        # override is parsed by the same rules (the request model, model_profile()).
        view = await self.releases.of_session(sid)
        rel = view.release
        profile = view.profile
        if body.model_profile:
            profile = model_profile(body.model_profile, None)
        main_instance = (await self.views.snapshot(sid, run_id)).main_instance_id
        instance_id = body.instance_id or main_instance
        child = instance_id != main_instance
        # R17: the purpose's profile (by reference, or this one) with its reserve, margin
        # and platform limit (domain.window.model_catalog, as the policy preview shows it).
        models, as_purpose = self.releases.catalog, profile_purpose(purpose, child)
        profile = for_purpose(rel.policy, as_purpose, profile, models.profiles, models.limits)
        tools = view.tools if body.tool_catalog is None else body.tool_catalog
        catalog = [t.wire() for t in tools]
        if not rel.policy.purpose_profiles.get(as_purpose).tools_allowed:
            # R11.3 (compaction, fixed) and R17: no tools offered, no schemas paid for.
            catalog = []
        bindings = rel.policy.hook_bindings  # R14/R17: the release's, as published
        self.hooks.check(bindings)
        if bindings:
            material = await self.hooks.prepare_before(
                PrepareRequest(sid, run_id, instance_id, purpose, material), bindings
            )
        return Target(
            sid,
            run_id,
            instance_id,
            purpose,
            rel,
            tuple(b.wire() for b in view.skills),
            profile,
            catalog,
            material,
            body.reserve_tokens,
            child,
        )

    async def _check_triggers(
        self, target: Target, built: Built, lineage: Lineage, reprepare_of: str | None
    ) -> tuple[Built, Lineage, JobStatus | None]:
        """R9.1: checked at every action prepare; the processor (state owner) decides and
        records the report; here we only decide whether this call must wait."""
        report = built.assembled.report
        scope = (target.session_id, target.run_id, target.instance_id)
        ttl_ms = target.profile.cache_rules.ttl_s * 1000
        seen = await self.compaction.observe(
            scope, target.release, built.rend, report, lineage, ttl_ms
        )
        over = report.calibrated_input > report.input_budget
        # R9.7: over the hard budget nothing is sent — wait (bounded) for the job. A
        # re-prepare for a hook's additions (R9.8) waits too, so there is room for them;
        # and so does a call whose prompt cache expired: it writes its whole prefix again,
        # so it should write the compacted one (``cache_expired``).
        wait = over or reprepare_of or seen.cache_expired
        if not (seen.due and wait and report.required <= report.input_budget):
            return built, lineage, None
        job_status = await self.compaction.wait_for_job(target.session_id, seen.key)
        # the job's lineage is the main one: a child thread's prepare rebuilds on it too.
        lineage = await self.compaction.lineage(
            target.session_id, target.run_id, target.instance_id, False
        )
        return await self._build(target, lineage), lineage, job_status

    async def _build(
        self, target: Target, lineage: Lineage, ahead: ReadAhead | None = None
    ) -> Built:
        policy = target.release.policy
        scope = (target.session_id, target.run_id, target.instance_id)
        rend, snap, frontier = await self.views.view_and_frontier(
            scope,
            self.frontier,
            _query(target),
            target.profile.message_overhead,
            lineage.summary,
            lineage.state.revocation_epoch,
            policy.large_result,
            policy.child_transfer_policy,
            ahead,
        )
        pending = rend.pending_calls()
        if pending:
            raise Conflict(
                "tool calls of this thread still wait for results",
                reason="tool_results_pending",
                call_ids=pending,
            )
        tools = target.catalog
        if (
            policy.purpose_profiles.get(profile_purpose(target.purpose, target.child)).tools_allowed
            and rend.externalized
            and all(t.get("name") != READ_CONTENT_TOOL["name"] for t in tools)
        ):
            # R10.3: views point at read_content, so the model is offered it (and its
            # schema is counted like every other tool's).
            tools = [*tools, READ_CONTENT_TOOL]
        assembled = assemble(
            profile=target.profile,
            counting_method=counting_label(target.profile.counting, self.content.counter.method),
            count=self.content.count,
            instructions=target.release.instructions,
            skill_bindings=target.skills,
            tools=tools,
            thread=rend,
            material=target.material,
            reserve_tokens=target.reserve_tokens,
            calibration=await self.calibration.get(
                await self.space_of(target.session_id), target.profile.name
            ),
            # R4.4: the frontier pins what the model acts on; a summarizer's call gets none.
            frontier=frontier if target.purpose != "compaction" else None,
            retention=policy.retention_rules,  # R10.1/R17: the release's, not a fixed table
            skills=policy.active_skill_policy,  # R12.3/R17: which skills stay active
        )
        return Built(rend, snap, assembled, tools, frontier)

    async def _provider(self, target: Target, built: Built) -> ProviderRequest:
        """The provider-ready request, with the profile's cache hints."""
        fmt, assembled = target.profile.provider_format, built.assembled
        sid, run, inst = target.session_id, target.run_id, target.instance_id
        key = prompt_cache_key(await self.space_of(sid), sid, run, inst)
        try:
            request = render_provider(
                assembled.messages,
                built.tools,
                fmt,
                key,
                target.profile.cache_rules,
                assembled.report.items.get("tool_schemas"),
            )
        except ValueError as exc:
            raise InvalidRequest(str(exc), field="provider_format") from exc
        return ProviderRequest(format=fmt, request=request)

    async def _answer(
        self, target: Target, built: Built, lineage: Lineage, body: PrepareIn
    ) -> PreparedContext:
        """The answer, held for the gateway's final check. Built without validation: its
        messages, tools and decisions are the plain values assembly made (thousands in a
        long thread), the models around them are validated as they are made."""
        rend, snap, assembled = built.rend, built.snap, built.assembled
        provider = await self._provider(target, built) if body.render else None
        deps = _dependencies(target, built, lineage)
        prepared_id = f"prep_{uuid.uuid4().hex[:16]}"
        # Written once, for the answer and the stored context (a long thread's are MBs).
        messages_json = WrittenOnce(assembled.messages)
        await self.prepared.remember(
            PreparedEntry(
                prepared_id,
                target.session_id,
                target.run_id,
                target.instance_id,
                target.purpose,
                assembled.messages,
                built.tools,
                assembled.report,
                assembled.manifest,
                assembled.tool_schema_sha256,
                target.profile,
                target.release.policy.compaction.context_ratio,
                body.reprepare_of,
                deps,
                target.instance_id if target.child else "main",
                messages_json,
            )
        )
        return PreparedContext.model_construct(
            prepared_id=prepared_id,
            provider=provider,
            purpose=target.purpose,
            session_id=target.session_id,
            run_id=target.run_id,
            instance_id=target.instance_id,
            messages=assembled.messages,
            tools=built.tools,
            budget=budget_of(assembled.report),
            protected_block_manifest=list(assembled.manifest),
            decisions=assembly_decisions(assembled.decisions) + view_decisions(rend, lineage),
            read_content_tool=READ_CONTENT_TOOL if rend.externalized else None,
            reprepare_of=body.reprepare_of,
            dependency_versions=deps,
            # the plan and constraints the frontier's blocks show, with the
            # records that set them (R4.4, R18).
            frontier=FrontierState(
                **built.frontier.versions(),
                plan=built.frontier.plan,
                constraints=list(built.frontier.constraints),
            ),
            inherited=Inherited(through_session_sequence=snap.through_session_sequence),
            record_count=rend.record_count,
        ).with_messages_json(messages_json)


def _dependencies(target: Target, built: Built, lineage: Lineage) -> DependencyVersions:
    """What this context was built from (R11.6): the view's watermarks, the release and
    its policy, the summary, and the task, plan and constraint versions."""
    summary = lineage.summary
    return DependencyVersions(
        through_session_sequence=built.snap.through_session_sequence,
        thread_last_sequence=built.rend.last_sequence,
        policy_revision=target.release.policy_revision,
        release_id=target.release.release_id,
        summary_id=summary.summary_id if summary else None,
        **built.frontier.versions(),
    )


def _query(target: Target) -> FrontierQuery:
    """Which frontier ``target``'s thread has."""
    return FrontierQuery(
        target.child, target.release.policy.child_transfer_policy.inherit_constraints
    )
