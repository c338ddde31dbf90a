"""Request bodies of the Prepare API (pydantic): validated by FastAPI before any handler
runs, and passed as they are to the use cases, which need not check them again."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from services.prepare.fields import Body, Id, Key, Offsets, RunId, Tokens
from services.prepare.release_spec import Hooks, Skills, Tools


class ReleaseIn(Body):
    release_id: Id | None = None
    agent_id: Id
    instructions: str
    # the same types a prepare reads the stored release with
    # (services/prepare/release_spec.py): what publishes here, a prepare can use.
    tool_catalog: Tools = Field(default_factory=list)
    skill_bindings: Skills = Field(default_factory=list)
    hook_bindings: Hooks = Field(
        default_factory=list,
        description="hooks bound to this release (point, hook, version, ...); frozen with it",
    )
    model_profile: dict[str, Any] = Field(
        description="context_capacity (required), output_reserve, safety_margin, "
        "platform_limit, input_limit, counting, message_overhead, provider_format, "
        "prices, cache_min_tokens, cache_ttl (docs/prompt-caching.md)"
    )
    context_policy: dict[str, Any] = Field(default_factory=dict)


class SessionIn(Body):
    session_id: Id | None = None
    space_id: Id | None = Field(None, description="the API key's space (default)")
    actor_id: Id | None = Field(
        None,
        description="the session's owner; by default the actor of a user key, or the one a"
        " host key names in X-AgentLoom-Actor",
    )
    release_id: Id


class RunIn(Body):
    run_id: RunId | None = None
    instance_id: Id | None = None


class RunLifecycleIn(Body):
    reason: str | None = None
    event_key: Key | None = Field(
        None,
        description="idempotency key; by default derived from the run's lifecycle counters"
        " (a retry gets the same key, the next resume or finish a new one)",
    )
    after: Offsets = Field(default_factory=dict)


class FinishIn(RunLifecycleIn):
    cancelled: bool = Field(False, description="stopped by the user (run_cancelled)")


class GrantIn(Body):
    actor_id: Id = Field(description="the actor who may read the session from now on")
    # Who granted is derived from the API key (and the actor a host key acts for): a
    # body field naming it would let any caller claim to be the owner.


class PrepareIn(Body):
    purpose: Literal["action", "compaction", "completion", "verification"] = Field(
        "action", description="action | compaction | completion (verification)"
    )
    instance_id: Id | None = None
    model_profile: dict[str, Any] | None = None
    tool_catalog: Tools | None = Field(
        None, description="instead of the release's tools (same rules as at publish)"
    )
    render: bool = Field(
        False,
        description="also return the request body in the model profile's "
        "provider_format (openai_chat | openai_responses | anthropic_messages)",
    )
    after: Offsets = Field(default_factory=dict)
    material: list[dict[str, Any]] = Field(
        default_factory=list,
        description="retrieved passages for this call (R12.4): citation_id, version, text,"
        " source, record_id; merged by citation, kept apart when versions conflict,"
        " dropped first when over budget — never instructions",
    )
    reserve_tokens: Tokens = Field(
        0,
        description="tokens to keep free (a re-prepare after context_reprepare_required"
        " passes the hook_tokens it was given)",
    )
    reprepare_of: Id | None = Field(
        None, description="the prepared_id this re-prepares (R9.8: asked at most once)"
    )


class ModelCallIn(Body):
    model_config = ConfigDict(protected_namespaces=())

    prepared_id: Id
    model_config_: dict[str, Any] = Field(
        default_factory=dict,
        alias="model_config",
        description="temperature, max_tokens, … as sent (recorded, R15.1)",
    )


class ModelResultIn(Body):
    response: dict[str, Any] = Field(default_factory=dict)
    usage: dict[str, Any] = Field(
        default_factory=dict, description="provider usage: input_tokens, output_tokens"
    )


def offsets_of(after: dict[str, int]) -> dict[int, int]:
    """The ``after`` offsets of a request, keyed by partition."""
    return {int(k): int(v) for k, v in after.items()}
