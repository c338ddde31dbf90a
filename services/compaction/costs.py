"""What a compaction job's summarizer calls cost (R18): their usage summed over the job,
priced on the profile of the release's ``compaction`` purpose, published as one
``model_call`` observability event with purpose ``compaction`` per job attempt that got
an answer from a model.

A job whose summarizer ran no model (the built-in extractive one) has no usage and no
cost, and publishes no ``model_call``: what it read and wrote stays in its
``compaction_finished`` event as our own counts (``covered_tokens``, ``summary_tokens``),
diagnostics that are never billed.

The event is published before the job's candidate is saved: a redelivery that finds the
saved candidate republishes it without a model call, and so without a second event.
Each call a model answered is also a GenAI span (``streams.genai``), with its own tokens
and cost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from domain.compaction.drafts import COMPACTION_PURPOSE
from domain.policy.context_policy import ContextPolicy
from domain.pricing import ModelPrices, cost_picos
from domain.usage import Usage
from domain.window.budget import ModelProfile
from domain.window.model_catalog import purpose_prices
from schemas.wire import CompactionRequest, ObservabilityEvent, encode_observability
from services.model_profiles import load_catalog
from storage.compaction.jobs import ReleasePricing
from streams import genai
from streams.kafka.publish import Publisher

log = logging.getLogger("agentloom.compaction")


@dataclass(frozen=True)
class AnsweredCall:
    """One summarizer call a model answered, as its GenAI span shows it: ``usage`` is
    what the model reported (None: nothing, and the span carries no token counts)."""

    provider: str
    model: str
    operation_id: str
    usage: Usage | None
    start_ns: int
    end_ns: int


@dataclass
class Spent:
    """One job attempt's model usage: the summarizer calls a model answered, valid or
    not (calls that ran no model are not here)."""

    usage: Usage = field(default_factory=Usage)
    answered: int = 0
    elapsed_ms: float = 0.0
    calls: list[AnsweredCall] = field(default_factory=list)

    def add(self, usage: Usage, elapsed_ms: float = 0.0, call: AnsweredCall | None = None) -> None:
        self.usage = self.usage + usage
        self.answered += 1
        self.elapsed_ms += elapsed_ms
        if call is not None:
            self.calls.append(call)


def compaction_prices(
    policy: ContextPolicy,
    release_profile: Mapping[str, Any] | None,
    catalog: Mapping[str, ModelProfile],
) -> ModelPrices | None:
    """The prices of the profile a ``compaction`` call is budgeted on: the release's, or
    the one ``purpose_profiles.compaction.model_profile_ref`` names. None: unpriced."""
    return purpose_prices(policy, COMPACTION_PURPOSE, release_profile, catalog)


def model_call_event(
    req: CompactionRequest, spent: Spent, prices: ModelPrices | None, now_ms: int
) -> ObservabilityEvent:
    """The job's ``model_call`` event: tokens by kind (``Usage.to_dict``) and, priced,
    the exact cost in pico-units of the currency."""
    return ObservabilityEvent(
        "model_call",
        req.session_id,
        req.run_id,
        req.instance_id,
        now_ms,
        req.policy_revision,
        purpose=COMPACTION_PURPOSE,
        job_id=req.job_id,
        budget_items=spent.usage.to_dict(),
        model_calls=spent.answered,
        elapsed_ms=spent.elapsed_ms,
        cost_picos=None if prices is None else cost_picos(spent.usage, prices),
        currency=None if prices is None else prices.currency,
    )


def call_spans(
    req: CompactionRequest, spent: Spent, prices: ModelPrices | None
) -> list[tuple[genai.ModelCallSpan, int, int]]:
    """Each answered call as a GenAI span (start, end): purpose ``compaction``, the job's
    session, its reported tokens and, priced, their exact cost."""
    out = []
    for c in spent.calls:
        cost = None if prices is None or c.usage is None else cost_picos(c.usage, prices)
        span = genai.ModelCallSpan(
            c.provider,
            c.model,
            COMPACTION_PURPOSE,
            req.session_id,
            {} if c.usage is None else c.usage.to_dict(),
            cost,
            None if cost is None or prices is None else prices.currency,
            {"job_id": req.job_id, "operation_id": c.operation_id, "run_id": req.run_id},
        )
        out.append((span, c.start_ns, c.end_ns))
    return out


class PriceSource(Protocol):
    async def prices(self, session_id: str) -> ModelPrices | None:
        """The prices of the session's ``compaction`` calls; None: unpriced."""


class ReleaseReads(Protocol):
    async def release_pricing(self, session_id: str) -> ReleasePricing | None: ...


@dataclass(frozen=True)
class ReleasePrices:
    """``PriceSource`` over the session's release (its policy and model profile, frozen
    at publish) and the deployment's named profiles (``ALC_MODEL_PROFILES_FILE``)."""

    reads: ReleaseReads
    catalog: Mapping[str, ModelProfile] = field(default_factory=dict)

    async def prices(self, session_id: str) -> ModelPrices | None:
        found = await self.reads.release_pricing(session_id)
        if found is None:
            return None
        return compaction_prices(found.policy, found.model_profile, self.catalog)


def catalog_profiles(path: str | None) -> dict[str, ModelProfile]:
    """The deployment's named model profiles, read and checked as Prepare reads them (a
    malformed file stops the service at start, naming the entry)."""
    return dict(load_catalog(path, "", None).profiles)


@dataclass(frozen=True)
class CostNotes:
    publisher: Publisher
    topic: str
    source: PriceSource

    async def publish(self, req: CompactionRequest, spent: Spent) -> None:
        """The job attempt's ``model_call`` event, if a model answered a summarizer call.
        Advisory: a failure to price or publish it never fails the job."""
        if not spent.answered:
            return
        try:
            prices = await self.source.prices(req.session_id)
            for span in call_spans(req, spent, prices):
                genai.record(*span)
            ev = model_call_event(req, spent, prices, int(time.time() * 1000))
            await self.publisher.send_advisory(
                self.topic, req.session_id.encode(), encode_observability(ev)
            )
        except Exception as exc:  # observability is advisory (R18)
            log.warning("job %s: model_call event not published: %s", req.job_id, exc)
