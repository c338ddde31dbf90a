"""Prometheus metrics of our processes (``prometheus-client``, Prometheus naming).

Defined once here so every process exports the same names; each process only moves the
ones that concern it. Prepare serves ``/metrics`` on its own HTTP port; the processes
without an HTTP API serve it on ``ALC_METRICS_PORT`` when set (off by default).
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

# Shared with the session processor: defined once, below us.
from streams.metrics import CONSUMER_LAG, DEAD_LETTERS, PROCESSOR_BATCH_SIZE, serve

__all__ = [
    "ANALYTICS_EVENTS",
    "COMPACTION_JOBS",
    "COMPACTION_JOB_SECONDS",
    "CONSUMER_LAG",
    "DEAD_LETTERS",
    "HTTP_REQUESTS",
    "PREPARE_SECONDS",
    "PROCESSOR_BATCH_SIZE",
    "SUMMARIZER_CALLS",
    "SUMMARIZER_TOKENS",
    "serve",
]

PREPARE_SECONDS = Histogram(
    "agentloom_prepare_seconds",
    "Prepare latency (request to PreparedContext or refusal)",
    ["purpose", "outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
HTTP_REQUESTS = Counter(
    "agentloom_http_requests_total", "HTTP requests answered", ["route", "status"]
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
ANALYTICS_EVENTS = Counter(
    "agentloom_analytics_events_total",
    "Messages consumed by the analytics group",
    ["topic_kind", "result"],  # observability|dead_letter, read|skipped
)
