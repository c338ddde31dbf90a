"""The model gateway (R9.8, R10.5, R14, R15.1, R6.4): the final check before a model call
and the report of its result, whose usage calibrates later estimates."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from domain.context.providers import prompt_cache_key
from domain.context.providers import render as render_provider
from domain.gate import GateDecision, check_manifest, check_tool_groups, gate
from domain.policy.sections import HookBinding
from domain.pricing import ModelPrices, cost_dict
from domain.usage import parse_usage
from domain.window.budget import Calibration, calibrate
from schemas.answers.prepared import (
    CallBudget,
    Drift,
    ModelCall,
    ModelResult,
)
from schemas.errors import NotFound
from services.prepare.assembly.prepare_hooks import HookCall, HookRegistry
from services.prepare.assembly.prepared import PreparedEntry, PreparedStore
from services.prepare.bodies import ModelCallIn, ModelResultIn
from services.prepare.calibration import CalibrationCache
from services.prepare.content import ContentStore
from services.prepare.notes import Notes
from services.prepare.publishing import ReleaseBook
from storage.calls.model_calls import ModelCalls, NewCall, Sample, StoredCall, UsageRecord
from streams import genai

CALIBRATION_WINDOW = 20  # reported calls per model replayed into an empty calibration


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _bounded(reported: int, estimated: int) -> int:
    """One report moves the factor by at most a bounded ratio, so a wrong usage figure
    cannot lock a model out of every session at once."""
    return min(max(reported, estimated // 2), estimated * 2)


class Gated(NamedTuple):
    """A context through the final check: the messages as the hooks left them (the
    provider format's, free-form), the gate's decision and the hooks that ran."""

    messages: list[dict[str, Any]]
    decision: GateDecision
    hooks: list[str]


@dataclass
class Gateway:
    calls: ModelCalls
    content: ContentStore
    prepared: PreparedStore
    notes: Notes
    hooks: HookRegistry
    calibration: CalibrationCache
    # A session's space (``Access.space_of``): whose content store holds its calls'
    # inputs and responses, and whose calibration its usage reports move.
    space_of: Callable[[str], Awaitable[str]]
    # R14/R1.4: a session's release (and so the hooks it binds) never changes.
    releases: ReleaseBook

    async def _bindings(self, sid: str) -> tuple[HookBinding, ...]:
        return (await self.releases.of_session(sid)).release.policy.hook_bindings

    async def model_call(self, sid: str, run_id: str, body: ModelCallIn) -> ModelCall:
        """The gateway's final check before a model call: ``model.chat.before`` hooks, the
        protected manifest, the same BudgetPolicy, then the model call record. Returns the
        provider-ready request to send. Idempotent per prepared context: a retry returns
        the same call."""
        prepared_id = body.prepared_id
        existing = await self.calls.for_prepared(prepared_id, sid, run_id)
        if existing is not None:
            return await self._replay(await self.space_of(sid), existing)
        # Any instance's context: from this process's cache or PostgreSQL.
        p = await self.prepared.get(prepared_id)
        if p is None or p.session_id != sid or p.run_id != run_id:
            raise NotFound(
                f"prepared context {prepared_id} is unknown or expired; prepare again",
                reason="prepared_not_found",
                prepared_id=prepared_id,
            )
        call, request = await self._check(p, body)
        if not await self.calls.insert(call):
            # A concurrent check of the same context won: send its input.
            return await self.model_call(sid, run_id, body)
        # Built without validation: ``request`` is the provider's body, as large as the
        # prompt; the budget was validated as it was made.
        return ModelCall.model_construct(
            call_id=call.call_id,
            prepared_id=prepared_id,
            status="ready",
            request=request,
            budget=call.budget,
            hook_versions=call.hook_versions,
            idempotent_replay=False,
        )

    async def _replay(self, space_id: str, existing: StoredCall) -> ModelCall:
        text = await self.content.blobs.text(space_id, existing.final_input_sha256)
        request = json.loads(text or "null")
        return ModelCall.model_construct(
            call_id=existing.call_id,
            prepared_id=existing.prepared_id,
            status=existing.status,
            request=request,
            budget=existing.budget,
            hook_versions=existing.hook_versions,
            idempotent_replay=True,
        )

    async def _check(self, p: PreparedEntry, body: ModelCallIn) -> tuple[NewCall, Any]:
        """Hooks, manifest, tool groups and budget (R9.8, R14): the call to record and the
        provider request to send."""
        messages, decision, used = await self._gate(p)
        key = prompt_cache_key(
            await self.space_of(p.session_id), p.session_id, p.run_id, p.instance_id
        )
        request = render_provider(
            messages,
            p.tools,
            p.profile.provider_format,
            key,
            p.profile.cache_rules,
            p.report.items.get("tool_schemas"),
        )
        blob = await self.content.put(
            await self.space_of(p.session_id),
            _json_bytes(request),
            "application/json",
            (decision.estimated_input, "gateway_final_estimate"),
        )
        report = p.report
        raw = report.estimated_input - report.items.get("reserved", 0) + decision.hook_tokens
        budget = report.to_dict() | {
            "final_estimated_input": decision.estimated_input,
            "final_estimated_input_raw": raw,  # before calibration: what calibration compares
            "hook_tokens": decision.hook_tokens,
            "soft_limit": decision.soft_limit,
        }
        if p.profile.prices is not None:
            # the prices the call is charged at, fixed when it is checked.
            budget["prices"] = p.profile.prices.to_dict()
        model_config = dict(body.model_config_) | {
            "model": p.profile.name,
            "provider_format": p.profile.provider_format,
        }
        new = NewCall(
            call_id=f"mc_{p.prepared_id.removeprefix('prep_')}",
            prepared_id=p.prepared_id,
            session_id=p.session_id,
            run_id=p.run_id,
            instance_id=p.instance_id,
            purpose=p.purpose,
            model=p.profile.name,
            final_input_sha256=blob.sha256,
            tool_catalog_version=p.tool_schema_sha256,
            model_config=model_config,
            dependency_versions=p.dependency_versions,
            manifest=list(p.manifest),
            budget=CallBudget.model_validate(budget),
            hook_versions=used,
        )
        return new, request

    async def _gate(self, p: PreparedEntry) -> Gated:
        """``model.chat.before`` hooks, then what they may not do: remove or alter a
        protected block, break a tool group, or push the call over the budget."""
        report = p.report
        call = HookCall(
            p.session_id,
            p.run_id,
            p.instance_id,
            p.prepared_id,
            p.purpose,
            tuple(p.tools),
            report.to_dict(),
        )
        messages, added, removed, used = await self.hooks.model_before(
            call,
            list(p.messages),
            p.manifest,
            self.content.count,
            p.profile.message_overhead,
            await self._bindings(p.session_id),
        )
        check_manifest(messages, p.manifest)
        check_tool_groups(messages)
        # Room reserved for the hooks at a re-prepare is what they now fill: not counted twice.
        reserved = report.items.get("reserved", 0)
        factor = max(1.0, report.calibration.factor) if report.calibration else 1.0
        decision = gate(
            estimated_before=math.ceil((report.estimated_input - reserved) * factor),
            added=added,
            removed=removed,
            input_budget=report.input_budget,
            soft_ratio=p.soft_ratio,
            reprepared=p.reprepare_of is not None,
            details={"prepared_id": p.prepared_id, "hooks": used},
        )
        return Gated(messages, decision, used)

    async def model_result(self, sid: str, call_id: str, body: ModelResultIn) -> ModelResult:
        """The runtime reports the response: ``model.chat.after`` (read-only), the response
        reference and the provider's usage, which calibrates later estimates (R6.4)."""
        call = await self.calls.get(call_id, sid)
        if call is None:
            raise NotFound(f"model call {call_id} not found")
        if call.status == "completed":
            return ModelResult(call_id=call_id, status="completed", drift=call.drift)
        response = body.response
        space_id = await self.space_of(sid)
        blob = await self.content.put(space_id, _json_bytes(response), "application/json")
        # Normalized once (domain.usage): tokens by kind, all input as input_tokens
        # (what calibration compares with the estimate), the cost when prices are known.
        usage = _usage_record(body.usage, _prices(call))
        # Claim the call first: of concurrent reports (on any instance) exactly one
        # calibrates and runs the after-hooks; the others read what it stored.
        sample = _sample(space_id, call, usage)
        done = await self.calls.complete(call_id, blob.sha256, usage, sample)
        if not done.claimed:
            return ModelResult(call_id=call_id, status="completed", drift=done.drift)
        drift = done.drift
        if done.calibration is not None:
            self.calibration.put(space_id, call.model, done.calibration)
        bindings = await self._bindings(call.session_id)
        if bindings:
            await self.hooks.model_after(
                HookCall(
                    call.session_id,
                    call.run_id,
                    call.instance_id,
                    call.prepared_id,
                    call.purpose,
                    (),
                    call.budget.model_dump(exclude_unset=True),
                ),
                response,
                bindings,
            )
        self.notes.usage(call, usage)
        genai.record(*_span(call, usage, time.time_ns()))
        return ModelResult(call_id=call_id, status="completed", drift=drift)

    async def seed_calibration(self) -> None:
        """At start: a space's model without a stored calibration (calls reported before
        migrations 012 and 019) gets one replayed from its last reported calls."""
        replayed: dict[tuple[str, str], Calibration] = {}
        for u in await self.calls.recent_usage(CALIBRATION_WINDOW):
            if u.estimated and u.reported:
                key = (u.space_id, u.model)
                cal = replayed.get(key, Calibration())
                replayed[key] = calibrate(cal, u.estimated, _bounded(u.reported, u.estimated))
        for (space_id, model), cal in replayed.items():
            await self.calibration.stored.seed(space_id, model, cal)


def _usage_record(raw: dict[str, Any], prices: ModelPrices | None) -> UsageRecord:
    """The usage stored and published: the neutral shape (domain.usage), its cache
    share and, with prices, its exact cost; an empty report stays empty."""
    usage = parse_usage(raw)
    if usage is None:
        return UsageRecord()
    share = usage.cache_share
    out = cast(UsageRecord, dict(usage.to_dict()))  # token counts by kind (domain.usage)
    out["cache_share"] = None if share is None else round(share, 6)
    if prices is not None:
        cost = cost_dict(usage, prices)
        out["cost"], out["cost_picos"] = cost["cost"], cost["cost_picos"]
        out["currency"] = cost["currency"]
    return out


def _span(
    call: StoredCall, usage: UsageRecord, now_ns: int
) -> tuple[genai.ModelCallSpan, int, int]:
    """The reported call as a GenAI span (R18): from the gateway's check, just before the
    runtime sent it, to this report of its result."""
    cost = usage.get("cost_picos")
    span = genai.ModelCallSpan(
        genai.provider_of(call.provider_format),
        call.model,
        call.purpose,
        call.session_id,
        usage,
        cost if isinstance(cost, int) else None,
        usage.get("currency") if isinstance(usage.get("currency"), str) else None,
        {"call_id": call.call_id, "run_id": call.run_id, "instance_id": call.instance_id},
    )
    start = now_ns if call.created_at is None else int(call.created_at.timestamp() * 1e6) * 1000
    return span, start, now_ns


def _prices(call: StoredCall) -> ModelPrices | None:
    """The prices of the call's model profile, as the prepare recorded them in its budget."""
    raw = call.budget.prices
    return ModelPrices.from_dict(raw) if isinstance(raw, dict) else None


def _sample(space_id: str, call: StoredCall, usage: UsageRecord) -> Sample | None:
    """The report's calibration step (R6.4): the model's factor moved by the reported
    input, bounded; None without a usable report."""
    estimated = int(call.budget.final_estimated_input_raw or 0)
    actual = usage.get("input_tokens")
    if not (isinstance(actual, int) and actual > 0 and estimated > 0):
        return None
    reported: int = actual

    def step(previous: Calibration) -> tuple[Calibration, Drift]:
        cal = calibrate(previous, estimated, _bounded(reported, estimated))
        return cal, Drift(
            estimated_input=estimated,
            reported_input=reported,
            drift_ratio=round(reported / estimated - 1.0, 6),
            calibration=cal.rounded(),
        )

    return Sample(space_id, call.model, step)
