"""Answers of a model call's life (R4, R6, R9, R10, R14, R15.1): the PreparedContext, the
gateway's final check and the report of the result.

Messages, tools and the provider request stay free-form objects: their shape is the
provider format's (``domain.context.providers``), not ours. Everything around them is typed.
A block's ``Decision`` is a TypedDict: a context holds one per block not sent as it is
(thousands in a long thread), built as plain dicts by ``domain.context`` and answered as
they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NotRequired

from pydantic import BaseModel, ConfigDict, PrivateAttr, with_config
from typing_extensions import TypedDict

from schemas.answers.records import record_config
from schemas.contracts import PlanItem


@dataclass(frozen=True)
class CalibrationState:
    """Provider-reported input over our estimate, smoothed per model (R6.4)."""

    # ``domain.window.budget.Calibration``: folded in by ``calibrate`` (an EWMA), stored
    # per space and model, answered rounded (``rounded``).
    __pydantic_config__ = record_config("forbid")

    factor: float = 1.0
    samples: int = 0
    last_drift: float = 0.0

    def rounded(self) -> CalibrationState:
        """As answered and reported: the ratios to 6 decimals."""
        return CalibrationState(round(self.factor, 6), self.samples, round(self.last_drift, 6))

    def to_dict(self) -> dict[str, Any]:
        return {
            "factor": round(self.factor, 6),
            "samples": self.samples,
            "last_drift": round(self.last_drift, 6),
        }


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


@dataclass(frozen=True)
class ProtectedBlock:
    """A block no hook may remove, alter or downgrade (R10.5)."""

    # The assembler's manifest entry (``domain.context.assemble``), checked by the gateway
    # (``domain.gate``) and published as it is.
    __pydantic_config__ = record_config("forbid")

    block_id: str
    kind: str
    role: str
    authority: str
    sha256: str
    source_ids: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "block_id": self.block_id,
            "kind": self.kind,
            "role": self.role,
            "authority": self.authority,
            "sha256": self.sha256,
            "source_ids": list(self.source_ids),
        }


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


@dataclass(frozen=True, kw_only=True)
class Plan:
    """The thread's plan: its latest update (``record_id``), as version ``version``."""

    # ``domain.frontier``'s: version 0 is "no plan yet"; its items are the plan event's
    # (``schemas.contracts.PlanItem``).
    __pydantic_config__ = record_config("forbid")

    version: int = 0
    record_id: str | None = None
    explanation: str | None = None
    items: tuple[PlanItem, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "record_id": self.record_id,
            "explanation": self.explanation,
            "items": [dataclasses.asdict(i) for i in self.items],
        }


@dataclass(frozen=True)
class Constraint:
    """A constraint in force, with the declaration that set it."""

    __pydantic_config__ = record_config("forbid")

    constraint_id: str
    text: str
    scope: str  # session | run
    version: int  # declarations of this id so far
    record_id: str  # the declaration in force
    source_record_id: str | None
    run_id: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "constraint_id": self.constraint_id,
            "text": self.text,
            "scope": self.scope,
            "version": self.version,
            "record_id": self.record_id,
            "source_record_id": self.source_record_id,
            "run_id": self.run_id,
        }


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
    # The messages' JSON, written once for this answer and the stored context (a long
    # thread's messages are most of both): the answer splices it in.
    _messages_json: Callable[[], bytes] | None = PrivateAttr(default=None)

    def with_messages_json(self, written: Callable[[], bytes]) -> PreparedContext:
        """This answer, its ``messages``' JSON given by ``written`` (written once)."""
        self._messages_json = written
        return self

    def json_fragments(self) -> dict[str, bytes]:
        """Fields whose JSON is written elsewhere (``AnswerResponse`` splices them)."""
        return {} if self._messages_json is None else {"messages": self._messages_json()}


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
