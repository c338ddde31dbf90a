"""Traces (issue 12, R18): the exporter a process installs from its settings (none by
default), the trace context in Kafka and HTTP headers and back, and the processor's
commit spans around a batch (``streams.tracing``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import ConsoleSpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from schemas.settings import Settings
from streams import tracing

pytestmark = pytest.mark.spec("R18")


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.install(exporter, "tests", batch=False)
    yield exporter
    tracing.reset()


@dataclass(frozen=True)
class Msg:
    headers: Any
    partition: int
    offset: int


def test_no_exporter_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ALC_TRACE_EXPORTER", raising=False)
    settings = Settings()
    assert settings.trace_exporter == "none"
    assert tracing.exporter_for(settings) is None
    assert tracing.configure(settings, "tests") is None
    assert not tracing.enabled()


def test_console_and_otlp_exporters_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALC_TRACE_EXPORTER", "console")
    assert isinstance(tracing.exporter_for(Settings()), ConsoleSpanExporter)
    monkeypatch.setenv("ALC_TRACE_EXPORTER", "otlp")
    monkeypatch.setenv("ALC_OTLP_ENDPOINT", "http://collector.test:4318/v1/traces")
    otlp = tracing.exporter_for(Settings())
    assert isinstance(otlp, OTLPSpanExporter)
    assert otlp._endpoint == "http://collector.test:4318/v1/traces"


def test_an_unknown_exporter_is_refused() -> None:
    with pytest.raises(ValueError, match="trace_exporter"):
        Settings(trace_exporter="zipkin")  # type: ignore[arg-type]


def test_none_leaves_an_installed_tracer_alone(spans: InMemorySpanExporter) -> None:
    assert tracing.configure(Settings(trace_exporter="none"), "tests") is None
    assert tracing.enabled()


def test_outside_a_span_nothing_is_injected() -> None:
    assert tracing.kafka_headers() is None
    assert tracing.http_headers() == {}


def test_kafka_headers_carry_the_current_span(spans: InMemorySpanExporter) -> None:
    with tracing.tracer().start_as_current_span("append") as span:
        headers = tracing.kafka_headers()
        http = tracing.http_headers()
    ctx = span.get_span_context()
    assert headers is not None and [name for name, _ in headers] == ["traceparent"]
    traceparent = headers[0][1].decode()
    assert traceparent == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"
    assert http == {"traceparent": traceparent}

    carried = tracing.context_of(headers)
    assert carried is not None
    assert trace.get_current_span(carried).get_span_context() == trace.SpanContext(
        ctx.trace_id, ctx.span_id, is_remote=True, trace_flags=ctx.trace_flags
    )


def test_tracestate_travels_too() -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    ctx = tracing.context_of({"traceparent": parent.encode(), "tracestate": b"vendor=x"})
    assert ctx is not None
    assert trace.get_current_span(ctx).get_span_context().trace_state.get("vendor") == "x"


@pytest.mark.parametrize(
    "headers",
    [None, [], [("other", b"x")], [("traceparent", b"not-a-traceparent")], {"tracestate": b"a=b"}],
)
def test_a_message_without_a_valid_traceparent_carries_nothing(headers: Any) -> None:
    assert tracing.context_of(headers) is None


def test_http_context_from_raw_asgi_headers() -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    ctx = tracing.context_of_http([(b"host", b"x"), (b"traceparent", parent.encode())])
    assert trace.get_current_span(ctx).get_span_context().trace_id == int(
        "0af7651916cd43dd8448eb211c80319c", 16
    )


def test_commit_spans_are_children_of_the_appends(spans: InMemorySpanExporter) -> None:
    with tracing.tracer().start_as_current_span("append") as append:
        headers = tracing.kafka_headers()
    batch = [Msg(headers, 2, 40), Msg(None, 2, 41), Msg({"traceparent": headers[0][1]}, 3, 7)]  # type: ignore[index]
    traced = tracing.carried(batch)
    assert [(c.partition, c.offset) for c in traced] == [(2, 40), (3, 7)]
    with tracing.commit_spans(traced, len(batch)):
        assert [s.name for s in spans.get_finished_spans()] == ["append"]  # open while handled
    commits = [s for s in spans.get_finished_spans() if s.name == tracing.COMMIT_SPAN]
    assert len(commits) == 2
    for commit in commits:
        assert commit.parent is not None
        assert commit.parent.span_id == append.get_span_context().span_id
        assert commit.context.trace_id == append.get_span_context().trace_id
        assert commit.kind == trace.SpanKind.CONSUMER
    assert commits[0].attributes is not None
    assert commits[0].attributes["messaging.kafka.offset"] == 40
    assert commits[0].attributes["messaging.batch.message_count"] == 3


def test_a_failed_batch_marks_its_commit_spans(spans: InMemorySpanExporter) -> None:
    with tracing.tracer().start_as_current_span("append"):
        headers = tracing.kafka_headers()
    with (
        pytest.raises(RuntimeError),
        tracing.commit_spans(tracing.carried([Msg(headers, 0, 1)]), 1),
    ):
        raise RuntimeError("database lost")
    (commit,) = [s for s in spans.get_finished_spans() if s.name == tracing.COMMIT_SPAN]
    assert commit.status.status_code == trace.StatusCode.ERROR


def test_server_span_joins_the_callers_trace(spans: InMemorySpanExporter) -> None:
    with tracing.tracer().start_as_current_span("client") as client:
        raw = [(k.encode(), v.encode()) for k, v in tracing.http_headers().items()]
    with tracing.server_span(tracing.PREPARE_SPAN, raw) as span:
        span.set_attribute("agentloom.outcome", "ok")
    (server,) = [s for s in spans.get_finished_spans() if s.name == tracing.PREPARE_SPAN]
    assert server.parent is not None and server.parent.span_id == client.get_span_context().span_id
    assert server.kind == trace.SpanKind.SERVER


def test_server_span_is_a_no_op_when_tracing_is_off() -> None:
    parent = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with tracing.server_span(tracing.PREPARE_SPAN, [(b"traceparent", parent)]) as span:
        assert not span.is_recording()
        assert not span.get_span_context().is_valid
