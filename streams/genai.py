"""Model calls as OpenTelemetry spans in the GenAI semantic conventions (R18), so that a
tracing backend that reads them (Langfuse, Phoenix, Datadog…) shows every model call of
a session with its tokens and cost, without an adapter.

Two kinds of call become a span, each recorded once it is over, with its own start and
end time:

- a runtime's model call, when Prepare takes its reported result (``services.prepare.
  model_gateway``): from the gateway's final check to the report, in the runtime's trace
  when the report carries a ``traceparent``;
- a summarizer call of a compaction job that a model answered (``services.compaction.
  costs``); the built-in extractive summarizer calls no model and makes no span.

The attribute names are the conventions' (``gen_ai.*``, the registry of the
``open-telemetry/semantic-conventions-genai`` repository), in this module only. Token
counts are the provider's, normalized (``Usage.to_dict``): ``gen_ai.usage.input_tokens``
is all input, cached and cache-write tokens included, as the conventions define it, and
the cache reads and writes are also given apart. ``gen_ai.system`` is the name older
conventions (≤ 1.36) and the backends built on them read; ``gen_ai.provider.name``
replaced it, and both are set. Our cost, purpose and ids are ``agentloom.*``.

Nothing is recorded unless this process installed a tracer (``streams.tracing``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue

from domain.context.formats.table import FORMAT_TABLE
from streams import tracing

OPERATION_NAME = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"  # superseded by gen_ai.provider.name; still read by backends
REQUEST_MODEL = "gen_ai.request.model"
CONVERSATION_ID = "gen_ai.conversation.id"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"

COST_PICOS = "agentloom.cost_picos"  # exact cost in 1e-12 of agentloom.currency
CURRENCY = "agentloom.currency"
PURPOSE = "agentloom.purpose"  # action | completion | compaction (R4.1)
SESSION_ID = "agentloom.session_id"

CHAT = "chat"  # gen_ai.operation.name of a chat completion or message request

# Usage.to_dict keys -> the conventions' token attributes.
_TOKENS = {
    "input_tokens": INPUT_TOKENS,
    "output_tokens": OUTPUT_TOKENS,
    "cached_input_tokens": CACHE_READ_INPUT_TOKENS,
    "cache_write_tokens": CACHE_CREATION_INPUT_TOKENS,
    "reasoning_tokens": REASONING_OUTPUT_TOKENS,
}


@dataclass(frozen=True)
class ModelCallSpan:
    """One model call as a span shows it. ``usage`` is the neutral usage shape
    (``Usage.to_dict``: all input as ``input_tokens``, cache reads and writes apart);
    empty when the provider reported none. ``ids``: further ``agentloom.*`` attributes
    (the call, run, job or operation it belongs to)."""

    provider: str
    model: str
    purpose: str
    session_id: str
    usage: Mapping[str, Any] = field(default_factory=dict)
    cost_picos: int | None = None
    currency: str | None = None
    ids: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The conventions' span name: ``{operation} {model}``."""
        return f"{CHAT} {self.model}"


def attributes(call: ModelCallSpan) -> dict[str, AttributeValue]:
    """The span's attributes: the conventions' names for what they define, ours beside."""
    out: dict[str, AttributeValue] = {
        OPERATION_NAME: CHAT,
        PROVIDER_NAME: call.provider,
        SYSTEM: call.provider,
        REQUEST_MODEL: call.model,
        CONVERSATION_ID: call.session_id,
        SESSION_ID: call.session_id,
        PURPOSE: call.purpose,
    }
    for key, name in _TOKENS.items():
        value = call.usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            out[name] = value
    if call.cost_picos is not None:
        out[COST_PICOS] = call.cost_picos
        if call.currency:
            out[CURRENCY] = call.currency
    for key, value in call.ids.items():
        out[f"agentloom.{key}"] = value
    return out


def provider_of(provider_format: str) -> str:
    """``gen_ai.provider.name`` of a request format (its ``ProviderFormat.provider``;
    the format itself when unknown)."""
    fmt = FORMAT_TABLE.get(provider_format)
    return provider_format if fmt is None else fmt.provider


def record(call: ModelCallSpan, start_ns: int, end_ns: int) -> None:
    """The call as a finished client span, a child of the current span (if any); nothing
    when this process installed no tracer."""
    if not tracing.enabled():
        return
    span = tracing.tracer().start_span(
        call.name, kind=SpanKind.CLIENT, attributes=attributes(call), start_time=start_ns
    )
    span.end(end_time=max(start_ns, end_ns))
