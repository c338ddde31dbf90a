"""Answers of a model call's life (R4, R6, R9, R10, R14, R15.1): the PreparedContext, the
gateway's final check and the report of the result.

Messages, tools and the provider request stay free-form objects: their shape is the
provider format's (``domain.context.providers``), not ours. Everything around them is typed.
A block's ``Decision`` is a TypedDict: a context holds one per block not sent as it is
(thousands in a long thread), built as plain dicts by ``domain.context`` and answered as
they are.
"""

from __future__ import annotations

from typing import Any, NotRequired

from pydantic import BaseModel, ConfigDict, with_config
from typing_extensions import TypedDict


class CalibrationState(BaseModel):
    """Provider-reported input over our estimate, smoothed per model (R6.4)."""

    model_config = ConfigDict(extra="forbid")

    factor: float
    samples: int
    last_drift: float


class Budget(BaseModel):
    """The budget report (R6): the estimate by item against the input budget, how it was
    counted and what the profile reserves. ``calibration`` and ``calibrated_input`` are
    present once the model has a calibration."""

    model_config = ConfigDict(extra="forbid")

    model: str
    input_budget: int
    estimated_input: int
    items: dict[str, int]
    required: int
    counting_method: str
    safety_margin: int
    output_reserve: int
    context_capacity: int
    ratio: float
    calibration: CalibrationState | None = None
    calibrated_input: int | None = None


class ProtectedBlock(BaseModel):
    """A block no hook may remove, alter or downgrade (R10.5)."""

    model_config = ConfigDict(extra="forbid")

    block_id: str
    kind: str
    role: str
    authority: str
    sha256: str
    source_ids: list[str]


@with_config(ConfigDict(extra="allow"))
class Decision(TypedDict):
    """What became of one block that is not a message as sent: kept, summarized,
    externalized, dropped, and why; some decisions carry more (a summary's record
    count)."""

    block_id: str
    decision: str
    reason: NotRequired[str | None]


class DependencyVersions(BaseModel):
    """What the context was built from (R11.6): the view's watermarks, the release and its
    policy, the summary in effect, and the task, plan and constraint versions."""

    model_config = ConfigDict(extra="allow")

    through_session_sequence: int
    thread_last_sequence: int
    policy_revision: str
    release_id: str
    summary_id: str | None
    task_version: int
    plan_version: int
    constraints_version: int


class PlanItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    item_id: str
    text: str
    status: str
    note: str | None


class Plan(BaseModel):
    """The thread's plan: its latest update (``record_id``), as version ``version``."""

    model_config = ConfigDict(extra="forbid")

    version: int
    record_id: str | None
    explanation: str | None
    items: list[PlanItem]


class Constraint(BaseModel):
    """A constraint in force, with the declaration that set it."""

    model_config = ConfigDict(extra="forbid")

    constraint_id: str
    text: str
    scope: str
    version: int
    record_id: str
    source_record_id: str | None
    run_id: str | None


class FrontierState(BaseModel):
    """The plan and constraints the context pins beside its history, with versions."""

    model_config = ConfigDict(extra="forbid")

    task_version: int
    plan_version: int
    constraints_version: int
    plan: Plan
    constraints: list[Constraint]


class Inherited(BaseModel):
    model_config = ConfigDict(extra="forbid")

    through_session_sequence: int


class ProviderRequest(BaseModel):
    """The request rendered for the profile's provider format; ``request`` is that
    format's own body."""

    model_config = ConfigDict(extra="forbid")

    format: str
    request: dict[str, Any]


class Timing(BaseModel):
    model_config = ConfigDict(extra="forbid")

    commit_wait_ms: float
    assemble_ms: float


class PreparedContext(BaseModel):
    """The prepared context of one model call (R4): messages and tools, the budget report,
    the protected block manifest, block decisions, the dependency versions, and the
    provider request when asked for (``render``)."""

    model_config = ConfigDict(extra="forbid")

    prepared_id: str
    provider: ProviderRequest | None
    purpose: str
    session_id: str
    run_id: str
    instance_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    budget: Budget
    protected_block_manifest: list[ProtectedBlock]
    decisions: list[Decision]
    read_content_tool: dict[str, Any] | None
    reprepare_of: str | None
    dependency_versions: DependencyVersions
    frontier: FrontierState
    inherited: Inherited
    record_count: int
    timing: Timing


class CallBudget(Budget):
    """The gateway's budget of a call: the prepare's report and the final check's
    estimate after hooks (``final_estimated_input``; ``_raw`` before calibration), the
    soft limit, and the prices the call is charged at when the profile has them. The
    ``final_*`` fields are absent from calls recorded before they were kept."""

    model_config = ConfigDict(extra="allow")

    final_estimated_input: int | None = None
    final_estimated_input_raw: int | None = None
    hook_tokens: int | None = None
    soft_limit: int | None = None
    prices: dict[str, Any] | None = None


class ModelCall(BaseModel):
    """The final check passed (R9.8, R10.5, R14): the provider-ready ``request`` to send
    (the format's own body); ``idempotent_replay`` when this call was checked before."""

    model_config = ConfigDict(extra="forbid")

    call_id: str
    prepared_id: str
    status: str
    request: Any
    budget: CallBudget
    hook_versions: list[str]
    idempotent_replay: bool


class Drift(BaseModel):
    """Our estimate of a call's input against the provider's count, and the model's
    calibration after it was folded in."""

    model_config = ConfigDict(extra="allow")

    estimated_input: int
    reported_input: int
    drift_ratio: float
    calibration: CalibrationState


class ModelResult(BaseModel):
    """A reported result (R15.1): the call completed and the drift of our estimate from
    the provider's input count (R6.4; None without usage)."""

    model_config = ConfigDict(extra="forbid")

    call_id: str
    status: str
    drift: Drift | None
