"""Prometheus metrics of our processes (``prometheus-client``, Prometheus naming).

Defined once here so every process exports the same names; each process only moves the
ones that concern it. Prepare serves ``/metrics`` on its own HTTP port; the processes
without an HTTP API serve it on ``ALC_METRICS_PORT`` when set (off by default).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

PREPARE_SECONDS = Histogram(
    "agentloom_prepare_seconds",
    "Prepare latency (request to PreparedContext or refusal)",
    ["purpose", "outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
HTTP_REQUESTS = Counter(
    "agentloom_http_requests_total", "HTTP requests answered", ["route", "status"]
)
PROCESSOR_BATCH_SIZE = Histogram(
    "agentloom_processor_batch_size",
    "Records per processor batch",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000),
)
DEAD_LETTERS = Counter(
    "agentloom_dead_letters_total",
    "Dead letters by reason (written by this process; in analytics: seen by its group)",
    ["reason"],
)
COMPACTION_JOBS = Counter(
    "agentloom_compaction_jobs_total", "Compaction jobs finished", ["outcome"]
)
COMPACTION_JOB_SECONDS = Histogram(
    "agentloom_compaction_job_seconds",
    "Compaction job time, request taken to outcome published",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0),
)
SUMMARIZER_CALLS = Counter(
    "agentloom_summarizer_calls_total",
    "Summarizer (purpose=compaction) calls",
    ["outcome"],  # ok|failed|timeout|invalid
)
SUMMARIZER_TOKENS = Counter(
    "agentloom_summarizer_tokens_total",
    "Summarizer tokens",
    ["direction"],  # input|output
)
CONSUMER_LAG = Gauge(
    "agentloom_consumer_lag",
    "Messages behind the partition's end offset, per consumer group and partition",
    ["group", "partition"],
)
ANALYTICS_EVENTS = Counter(
    "agentloom_analytics_events_total",
    "Messages consumed by the analytics group",
    ["topic_kind", "result"],  # observability|dead_letter, read|skipped
)


def serve(port: int, host: str = "127.0.0.1") -> None:
    """Serve ``/metrics`` from a background thread (prometheus-client's own server)."""
    start_http_server(port, addr=host)
