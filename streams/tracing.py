"""Traces (R18): OpenTelemetry spans from the SDK's append through the
processor's commit to Prepare's answer, in one trace.

The W3C trace context (``traceparent``/``tracestate``) rides along with the event: in
Kafka message headers from the SDK to the processor, in HTTP headers from the SDK to
Prepare. Span names:

- ``sdk.append`` (producer): the SDK publishing one event; its context is in the headers.
- ``processor.commit`` (consumer): the processor handling the batch that held a traced
  event — decoded, written in one PostgreSQL transaction, its publishes acknowledged —
  a child of that event's ``sdk.append``.
- ``sdk.prepare`` (client) and ``prepare.answer`` (server): a prepare, asked and answered.
- ``chat <model>`` (client): a model call, in the GenAI semantic conventions
  (``streams.genai``): a runtime's, reported to Prepare, and a compaction's summarizer call.

The exporter comes from the settings (``ALC_TRACE_EXPORTER``): ``none`` by default, when
nothing is installed here — the SDK then follows whatever tracer provider its host
runtime set globally (a no-op one unless it set one), and the processor and Prepare read
no trace headers at all. Our own provider is kept in this module rather than set as the
global one: the global can be set only once per process, and the runtime that embeds the
SDK may own it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from schemas.settings import Settings

APPEND_SPAN = "sdk.append"
COMMIT_SPAN = "processor.commit"
PREPARE_CLIENT_SPAN = "sdk.prepare"
PREPARE_SPAN = "prepare.answer"

# Kafka headers as aiokafka gives and takes them; faust may hand over a mapping.
KafkaHeaders = list[tuple[str, bytes]]
_CARRIED = ("traceparent", "tracestate")
_CARRIED_BYTES = tuple(name.encode() for name in _CARRIED)
_PROPAGATOR = TraceContextTextMapPropagator()
_LIBRARY = "agentloom"


class _State:
    """The tracer installed by ``install`` (None: nothing installed, see the module doc)."""

    tracer: trace.Tracer | None = None


def exporter_for(settings: Settings) -> SpanExporter | None:
    """The exporter ``settings`` ask for; None for ``none`` (the default)."""
    if settings.trace_exporter == "console":
        return ConsoleSpanExporter()
    if settings.trace_exporter == "otlp":
        # Imported only when chosen: it pulls in protobuf and requests.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=settings.otlp_endpoint)
    return None


def configure(settings: Settings, service_name: str) -> TracerProvider | None:
    """At a process's start: install the exporter the settings name. ``none`` installs
    nothing and leaves an already installed tracer alone (a test's in-memory one)."""
    exporter = exporter_for(settings)
    return None if exporter is None else install(exporter, service_name)


def install(exporter: SpanExporter, service_name: str, *, batch: bool = True) -> TracerProvider:
    """Trace through ``exporter`` from now on. ``batch=False`` exports each span as it
    ends (tests); a process batches, off the event loop, in the SDK's own thread. The
    provider flushes at interpreter exit (its ``shutdown_on_exit``)."""
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    _State.tracer = provider.get_tracer(_LIBRARY)
    return provider


def reset() -> None:
    """Back to nothing installed (tests)."""
    _State.tracer = None


def enabled() -> bool:
    """Whether this process installed a tracer: the processor and Prepare parse trace
    headers only then."""
    return _State.tracer is not None


def tracer() -> trace.Tracer:
    """Ours when installed, otherwise the host's global one (no-op unless it set one)."""
    return _State.tracer or trace.get_tracer(_LIBRARY)


def _traced_now() -> bool:
    return trace.get_current_span().get_span_context().is_valid


def kafka_headers() -> KafkaHeaders | None:
    """The current trace context as Kafka headers; None outside a span, so an untraced
    event carries no header bytes at all."""
    if not _traced_now():
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return [(name, value.encode("ascii")) for name, value in carrier.items()]


def http_headers() -> dict[str, str]:
    """The current trace context as HTTP headers (empty outside a span)."""
    carrier: dict[str, str] = {}
    if _traced_now():
        _PROPAGATOR.inject(carrier)
    return carrier


def context_of(headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None) -> Context | None:
    """The trace context a Kafka message carries; None without a valid ``traceparent``
    (nothing to join: no span is made for it)."""
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    carrier = {k: v.decode("latin-1") for k, v in pairs if k in _CARRIED and v is not None}
    if "traceparent" not in carrier:
        return None
    ctx = _PROPAGATOR.extract(carrier)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def context_of_http(raw: Iterable[tuple[bytes, bytes]]) -> Context:
    """The trace context of an ASGI request's raw headers (an empty one without)."""
    carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw if k in _CARRIED_BYTES}
    return _PROPAGATOR.extract(carrier)


class Delivered(Protocol):
    """A consumed message as both drivers see it (aiokafka's record, faust's message)."""

    @property
    def headers(self) -> Any: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...


@dataclass(frozen=True)
class Carried:
    """A consumed message that carries a trace context."""

    context: Context
    partition: int
    offset: int


def carried(messages: Iterable[Delivered]) -> list[Carried]:
    """The traced messages of a batch (call only when ``enabled``: it reads headers)."""
    out = []
    for m in messages:
        ctx = context_of(m.headers)
        if ctx is not None:
            out.append(Carried(ctx, m.partition, m.offset))
    return out


@contextlib.contextmanager
def commit_spans(traced: Sequence[Carried], batch_size: int) -> Iterator[None]:
    """One ``processor.commit`` span per traced message, each a child of the span that
    appended it, open while the whole batch is handled: the batch is the unit that is
    written, published and acknowledged, so each traced event's commit took that long."""
    if not traced:
        yield
        return
    t = tracer()
    spans = [
        t.start_span(
            COMMIT_SPAN,
            context=c.context,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "kafka",
                "messaging.destination.partition.id": str(c.partition),
                "messaging.kafka.offset": c.offset,
                "messaging.batch.message_count": batch_size,
            },
        )
        for c in traced
    ]
    try:
        yield
    except BaseException as exc:
        _failed(spans, exc)
        raise
    finally:
        for span in spans:
            span.end()


def _failed(spans: Iterable[Span], exc: BaseException) -> None:
    for span in spans:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))


def server_span(
    name: str, raw_headers: Iterable[tuple[bytes, bytes]]
) -> contextlib.AbstractContextManager[Span]:
    """The current span of a request, joined to the caller's trace (``traceparent``);
    when this process installed no tracer, a no-op that reads no header."""
    if not enabled():
        return contextlib.nullcontext(trace.INVALID_SPAN)
    return tracer().start_as_current_span(
        name, context=context_of_http(raw_headers), kind=SpanKind.SERVER
    )


@contextlib.contextmanager
def joined(raw_headers: Iterable[tuple[bytes, bytes]]) -> Iterator[None]:
    """The caller's trace (``traceparent`` of an ASGI request's raw headers) as the
    current context inside the block, so spans made there join it; when this process
    installed no tracer, nothing is read."""
    if not enabled():
        yield
        return
    token = otel_context.attach(context_of_http(raw_headers))
    try:
        yield
    finally:
        otel_context.detach(token)
