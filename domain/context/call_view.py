"""What one model call saw, and why (R18, R4.2, R10.3, R11.7): the blocks in order with
role, category, retention, tokens, decision and reason; the budget items as shares of the
InputBudget; the summary chain with each summary's covered ranges. Pure.

The web inspector, diagnostics and ``agentloom session inspect`` show this one view. Its
blocks are those stored when the call was made (``domain.context.sent_view``):
each with the role it was sent with; later retractions and revocations are only noted
beside a block (``retracted_since`` / ``revoked_since``), never change it. A call recorded
before views were stored (or whose prepared context was gone) is ``rebuilt``: its blocks
are rebuilt from what the call record keeps (dependency versions: the snapshot boundary,
the thread's last sequence and the summary in effect; the protected manifest; the
itemized budget) and the source records, with the assembler's own tables
(``domain.context.rendering.RETENTION`` / ``KEPT_BECAUSE``), so a record's category there follows
the same rules rather than a stored copy.

The view's budget bar, summary chain and cost are the diagnostics answer's records
(``schemas.answers.diagnostics``): the answer publishes them as the domain builds them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from domain.authority import DERIVED_ROLE
from domain.context.rendering import KEPT_BECAUSE, RETENTION, RecordView
from domain.pricing import format_cost
from schemas.answers.diagnostics import (
    NO_RESULT,
    NO_SHARE,
    BarSegment,
    BudgetBar,
    CallCost,
    SummaryLink,
)

ROLE = {
    "user_input": "user",
    "supplement": "user",
    "assistant_message": "assistant",
    "tool_call": "assistant",
    "tool_outcome": "tool",
    "child_result": "user",
}
# A record of the thread's own run, by kind (before the boundary it is "history").
OWN_CATEGORY = {
    "user_input": "task",
    "supplement": "task",
    "assistant_message": "interactions",
    "tool_call": "interactions",
    "tool_outcome": "tool_results",
    "child_result": "material",
}


@dataclass(frozen=True)
class CallFacts:
    """What is stored about one model call, and the records its view was built from."""

    call_id: str
    run_id: str
    instance_id: str
    purpose: str
    model: str
    status: str
    budget: Mapping[str, Any]
    manifest: tuple[Mapping[str, Any], ...]
    dependency_versions: Mapping[str, Any]
    hook_versions: tuple[str, ...]
    records: tuple[RecordView, ...]
    chain: tuple[SummaryLink, ...]
    inline_max_tokens: int  # the release's large-result rule (R10.3)
    frontier: Mapping[str, Any] | None = None  # the plan and constraints it saw
    usage: Mapping[str, Any] | None = None  # the stored, normalized usage of its result
    priced: bool = False  # the call's model profile had prices


NO_USAGE = "no usage reported"
NOT_PRICED = "not priced"
NO_COST = CallCost(reported=False)  # a view before its cost is known


@dataclass(frozen=True)
class CostTotal:
    """The exact sum of the priced calls' costs in one currency."""

    currency: str
    cost_picos: int
    cost: str
    calls: int


@dataclass(frozen=True)
class Block:
    block_id: str
    role: str | None  # None: not sent (a record a summary stands for, in a stored view)
    category: str
    retention: str
    tokens: int | None
    decision: str  # kept | summarized | externalized
    reason: str
    record_id: str | None = None
    kind: str | None = None
    sequence: int | None = None
    record_ids: tuple[str, ...] = ()
    summary_id: str | None = None
    retracted_since: bool = False  # noted at read time: the view itself never changes
    revoked_since: bool = False


@dataclass(frozen=True)
class CallView:
    call_id: str
    run_id: str
    instance_id: str
    purpose: str
    model: str
    status: str
    counting_method: str | None
    policy_revision: str | None
    release_id: str | None
    hook_versions: tuple[str, ...]
    blocks: tuple[Block, ...]
    bar: BudgetBar
    chain: tuple[SummaryLink, ...]
    # the plan and the constraints in force the call saw, with their versions
    # and the records that set them (kept, required: R4.4).
    frontier: Mapping[str, Any] | None = None
    # False when the blocks are the ones stored with the call.
    rebuilt: bool = True
    request_sha256: str | None = None
    summary_id: str | None = None
    summary_version: int | None = None
    cost: CallCost = NO_COST

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def externalized(r: RecordView, inline_max_tokens: int) -> bool:
    """R10.3, as the renderer decides it: a tool result over the inline limit, or one of
    which only a prefix was loaded, is shown as a view with a read-back reference."""
    return r.kind == "tool_outcome" and (
        r.token_count > inline_max_tokens or r.full_length > len(r.text)
    )


# Why the frontier's blocks are there (as the assembler says it).
FRONTIER_REASONS = {"plan": "current_plan", "constraints": "user_constraints_in_force"}


def call_view(f: CallFacts) -> CallView:
    deps = f.dependency_versions
    return CallView(
        call_id=f.call_id,
        run_id=f.run_id,
        instance_id=f.instance_id,
        purpose=f.purpose,
        model=f.model,
        status=f.status,
        counting_method=f.budget.get("counting_method"),
        policy_revision=deps.get("policy_revision"),
        release_id=deps.get("release_id"),
        hook_versions=f.hook_versions,
        blocks=tuple(call_blocks(f)),
        bar=budget_bar(f.budget),
        chain=f.chain,
        frontier=f.frontier,
        summary_id=f.chain[0].summary_id if f.chain else None,
        cost=call_cost(f.status, f.usage, f.priced),
    )


def call_blocks(f: CallFacts) -> list[Block]:
    """Protected blocks that are not records (instructions, skills, ...) first, then the
    summary in effect, then each source record with what was done to it."""
    through = int(f.dependency_versions.get("through_session_sequence") or 0)
    items = f.budget.get("items") or {}
    blocks = _protected(f.manifest, items, f.records)
    if f.chain:
        head = f.chain[0]
        blocks.append(
            _block(f"summary:{head.summary_id}", DERIVED_ROLE, "summary", head.summary_tokens)
        )
    covered = {i for s in f.chain for i in s.covered_record_ids}
    protected = {str(i) for p in f.manifest for i in p.get("source_ids") or ()}
    for r in f.records:
        category = "history" if r.session_sequence <= through else OWN_CATEGORY.get(r.kind, "state")
        b = _block(f"rec:{r.record_id}", ROLE.get(r.kind, "system"), category, r.token_count)
        b = replace(b, record_id=r.record_id, kind=r.kind, sequence=r.session_sequence)
        if r.record_id in protected:
            b = replace(b, retention="required")
        if r.record_id in covered:
            b = replace(b, decision="summarized", reason="covered_by_summary")
        elif externalized(r, f.inline_max_tokens):
            b = replace(b, decision="externalized", reason="large_result_view")
        blocks.append(b)
    return blocks


def _block(block_id: str, role: str, category: str, tokens: int | None) -> Block:
    return Block(
        block_id=block_id,
        role=role,
        category=category,
        retention=RETENTION.get(category, "compressible"),
        tokens=tokens,
        decision="kept",
        reason=KEPT_BECAUSE.get(category, "in_thread"),
    )


def _protected(
    manifest: Iterable[Mapping[str, Any]], items: Mapping[str, Any], records: Iterable[RecordView]
) -> list[Block]:
    ids = {r.record_id for r in records}
    out = []
    for p in manifest:
        if {str(i) for i in p.get("source_ids") or ()} & ids:
            continue  # a record of the thread: listed with it
        kind = str(p.get("kind"))
        tokens = items.get(kind, items.get(f"{kind}s"))
        b = _block(str(p.get("block_id")), str(p.get("role")), kind, tokens)
        reason = FRONTIER_REASONS.get(kind, "protected_block")
        out.append(replace(b, retention="required", reason=reason))
    return out


def budget_bar(budget: Mapping[str, Any]) -> BudgetBar:
    """Budget items as shares of the InputBudget (percent, for a stacked bar); an estimate
    over the budget is shown against itself, so the shares never pass 100%."""
    total = int(budget.get("input_budget") or 0)
    items = {str(k): int(v) for k, v in (budget.get("items") or {}).items() if int(v) > 0}
    used = sum(items.values())
    denominator = max(total, used, 1)
    segments = tuple(
        BarSegment(k, v, round(100 * v / denominator, 2))
        for k, v in sorted(items.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    free = max(0, total - used)
    return BudgetBar(
        input_budget=total,
        estimated_input=int(budget.get("final_estimated_input") or used),
        segments=segments,
        free=free,
        free_percent=round(100 * free / denominator, 2),
    )


def stored_view(
    rebuilt: CallView, stored: Mapping[str, Any], retracted: set[str], revoked: set[str]
) -> CallView:
    """The call's view with the blocks stored when it was made (``domain.context.sent_view``);
    ``retracted`` / ``revoked``: record ids changed since, noted beside their blocks."""
    blocks = []
    for b in stored.get("blocks") or ():
        ids = tuple(str(i) for i in b.get("record_ids") or ())
        blocks.append(
            Block(
                block_id=str(b["block_id"]),
                role=b.get("role"),
                category=str(b["category"]),
                retention=str(b["retention"]),
                tokens=b.get("tokens"),
                decision=str(b["decision"]),
                reason=str(b["reason"]),
                record_id=ids[0] if ids else None,
                kind=b.get("kind"),
                sequence=b.get("sequence"),
                record_ids=ids,
                summary_id=b.get("summary_id"),
                retracted_since=bool(set(ids) & retracted),
                revoked_since=bool(set(ids) & revoked),
            )
        )
    return replace(
        rebuilt,
        blocks=tuple(blocks),
        rebuilt=False,
        request_sha256=stored.get("request_sha256"),
        summary_id=stored.get("summary_id"),
        summary_version=stored.get("summary_version"),
    )


def call_cost(status: str, usage: Mapping[str, Any] | None, priced: bool) -> CallCost:
    """The call's cost as stored with its result (``usage``: the normalized shape of
    ``domain.pricing.Usage.to_dict`` with ``cache_share`` and, when priced, ``cost_picos``
    and ``currency``). A usage stored with ``input_tokens`` only counts it as fresh."""
    if not usage:
        reported = status == "completed"
        label = NO_USAGE if reported else NO_RESULT
        return CallCost(reported=reported, priced=priced, cost_label=label)
    cached = _count(usage, "cached_input_tokens")
    write = _count(usage, "cache_write_tokens")
    if "fresh_input_tokens" in usage:
        fresh = _count(usage, "fresh_input_tokens")
    else:
        fresh = max(0, _count(usage, "input_tokens") - cached - write)
    total = fresh + cached + write
    share = None if total == 0 else round(100 * cached / total, 1)
    raw = usage.get("cost_picos")
    picos = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
    currency = None if picos is None else str(usage.get("currency") or "")
    amount = None if picos is None else format_cost(picos)
    return CallCost(
        reported=True,
        priced=priced or picos is not None,
        fresh_input_tokens=fresh,
        cached_input_tokens=cached,
        cache_write_tokens=write,
        output_tokens=_count(usage, "output_tokens"),
        reasoning_tokens=_count(usage, "reasoning_tokens"),
        cache_share_percent=share,
        cache_share_label=NO_SHARE if share is None else f"{share:.1f}%",
        cost=amount,
        cost_picos=picos,
        currency=currency,
        cost_label=NOT_PRICED if amount is None else f"{amount} {currency}",
    )


def _count(usage: Mapping[str, Any], key: str) -> int:
    v = usage.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def session_cost(costs: Iterable[CallCost]) -> tuple[CostTotal, ...]:
    """Per currency, in its name's order: the exact sum of the calls' pico-unit costs
    (calls without a cost are not in any total)."""
    sums: dict[str, tuple[int, int]] = {}
    for c in costs:
        if c.cost_picos is not None and c.currency is not None:
            picos, n = sums.get(c.currency, (0, 0))
            sums[c.currency] = (picos + c.cost_picos, n + 1)
    return tuple(
        CostTotal(currency=k, cost_picos=p, cost=format_cost(p), calls=n)
        for k, (p, n) in sorted(sums.items())
    )
