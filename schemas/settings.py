"""The one typed settings object, read from ``ALC_*`` environment variables.

Built once per process at its entry point and passed down as explicit parameters;
adapters never read the environment themselves. Defaults match ``deploy/stack.sh``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

# PostgreSQL's plan_cache_mode values (``Settings.pg_plan_cache_mode``).
PlanCacheMode = Literal["auto", "force_generic_plan", "force_custom_plan"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ALC_", frozen=True)

    kafka_bootstrap: str = "127.0.0.1:19092"
    # How a process authenticates to the broker (docs/security.md). SASL_PLAINTEXT or
    # SASL_SSL with SCRAM-SHA-512, as deploy/kafka.sh starts it; PLAINTEXT only for a
    # broker without authentication (a testcontainers broker).
    kafka_security_protocol: Literal["PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"] = "SASL_PLAINTEXT"
    kafka_sasl_mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"] = "SCRAM-SHA-512"
    # This process's principal. Unset: the principal named after the process's role
    # (processor, compaction, prepare, analytics, cli, runtime), its password read from
    # kafka_credentials_file — the local stack's layout.
    kafka_username: str | None = None
    kafka_password: SecretStr | None = None
    # "name=password" lines (deploy/kafka.sh writes <state_dir>/secrets/kafka-users.env).
    kafka_credentials_file: str | None = None
    # CA certificate (PEM) that signed the broker's TLS certificate (SASL_SSL).
    kafka_ssl_cafile: str | None = None
    # The bus's secrets (docs/security.md, domain/context/envelope.py), each process only
    # its own; by default files in bus_secrets_dir (<state_dir>/secrets, which
    # deploy/kafka.sh fills), re-read when they change (a rotation needs no restart):
    # - Prepare, compaction: this service's signing key (bus-<service>.key);
    # - the processor: "service=key" lines, every key it accepts per service, two during
    #   a rotation (bus-verify.env), and the key issuer secret(s) (key-issuer.key);
    # - agentloom-keys (issuing host keys): the key issuer secret, its first line.
    bus_secrets_dir: str | None = None
    bus_signing_key: SecretStr | None = None
    bus_signing_key_file: str | None = None
    bus_verify_keys: SecretStr | None = None  # "service=key" pairs, comma- or line-separated
    bus_verify_keys_file: str | None = None
    key_issuer_secret: SecretStr | None = None  # one secret, or current,previous
    key_issuer_secret_file: str | None = None
    # How often a process looks at its bus secret files for a change (a rotation's step).
    bus_secrets_reload_s: float = 1.0
    # Broker quotas of every runtime principal (domain/bus_access.py, docs/security.md):
    # bytes a second it may produce, and the share of one broker thread its requests may
    # take (100 = a whole thread). A runtime over them is slowed, never refused.
    runtime_producer_byte_rate: int = 8 << 20
    runtime_request_percentage: float = 50.0
    pg_dsn: str = "postgresql://agentloom@127.0.0.1:55432/agentloom"
    # Each process queries as its own login (alc_processor, alc_prepare, ...: the grants
    # of storage/roles.py) on pg_dsn's server and database, while migrations run as
    # pg_dsn's user (the owner). The local stack sets it; a deployment instead gives each
    # process its own pg_dsn (deploy/k8s).
    pg_role_logins: bool = False
    # pg_dsn's password, when it is not in the DSN (a Kubernetes Secret's value).
    pg_password: SecretStr | None = None
    pg_pool_min: int = 2
    pg_pool_max: int = 10
    # PostgreSQL's plan_cache_mode on the pools of the processor, Prepare, compaction and
    # analytics. "force_generic_plan": a prepared statement is planned once per
    # connection (again after its tables' statistics change), not at every call, which
    # "auto" did for many of our short statements (~0.4-0.9 ms of planning for ~0.03-0.1
    # of execution; docs/scaling.md). Statements whose best plan depends on their
    # arguments ask for one made for them (storage.plans.custom_plan).
    pg_plan_cache_mode: PlanCacheMode = "force_generic_plan"

    topic_records: str = "ctx.records"
    topic_committed: str = "ctx.records.committed"
    topic_dead_letter: str = "ctx.deadletter"
    topic_compaction_requests: str = "ctx.compaction.requests"
    topic_observability: str = "ctx.observability"
    # Prepare's observability notes go through a producer of their own that waits this
    # long for more before it sends: nobody waits for a note, and one request a second
    # costs the broker less than one a prepare (docs/scaling.md). 0: sent at once.
    observability_linger_ms: int = 100
    compaction_group: str = "agentloom-compaction"
    # the analytics consumer group (ctx.observability + dead letters → rollups).
    analytics_group: str = "agentloom-analytics"
    analytics_batch_max: int = 2000
    # Analytics is never on the latency path (R18): on a host it shares with the processor
    # or Prepare it yields the CPU to them. "idle": SCHED_IDLE, it runs only on CPU time
    # nobody else wants (rollups lag under saturation and catch up after); "low": nice
    # 10; "normal": as scheduled.
    analytics_cpu: Literal["idle", "low", "normal"] = "idle"
    # The processor's, Prepare's and the compaction service's CPU policy
    # (streams/tuning/cpu_policy.py): "batch" (SCHED_BATCH: a woken process does not
    # preempt the one that woke it) or "normal".
    service_cpu: Literal["batch", "normal"] = "batch"
    # Prometheus /metrics of the processes without an HTTP API (processor, compaction,
    # analytics): a port to serve it on, or None (off). Prepare serves it on its own port.
    metrics_port: int | None = None
    # the summarizer behind the model gateway: "extractive" (built in, no model),
    # "openai" (an OpenAI-compatible Chat Completions endpoint) or "anthropic" (Anthropic's
    # Messages API, its SDK; the base URL without /v1, default https://api.anthropic.com;
    # the API key is required). Base URL, model, key and timeout below serve either.
    summarizer: Literal["extractive", "openai", "anthropic"] = "extractive"
    summarizer_base_url: str | None = None
    summarizer_model: str | None = None
    summarizer_api_key: SecretStr | None = None
    summarizer_timeout_s: float = 30.0
    # What a model summarizer reads per job besides the history it covers: its
    # instruction (services/compaction/prompt.md with its answer schema, ~2,200 tokens),
    # which the processor's gain check bills at the compaction profile's input price.
    summarizer_overhead_tokens: int = 2_300
    # Per summary request: the segment budget, and a model summarizer's output cap per call
    # (the built-in extractive summarizer's segments share the summary's bound instead).
    compaction_segment_tokens: int = 6000
    compaction_output_tokens: int = 800
    # Over its bound, the built-in summarizer summarizes what a job covers again from its
    # records while they are at most this many tokens (~2 ms of CPU per 1k tokens), instead
    # of rolling the parent summary's entries up; 0: always roll up. A model summarizer
    # always rolls up (its calls are billed).
    compaction_rederive_tokens: int = 65_536
    # context.compact.before/after hooks (R14): comma-separated "module:factory" callables
    # returning a CompactHook, loaded by the compaction service at start-up.
    compaction_hooks: str = ""
    # context.prepare.* and model.chat.* hooks (R14), "module:factory" callables, loaded by
    # the Prepare service at start-up.
    prepare_hooks: str = ""
    # the deployment's model catalog (R17), which policies name: a JSON file of named model
    # profiles ({"name": {profile}}, each checked as a release's model_profile is) for
    # purpose_profiles.<p>.model_profile_ref, and named platform limits on context
    # capacity ("name=tokens,name=tokens") for model_limit_ref. Publish refuses others.
    model_profiles_file: str | None = None
    model_limits: str = ""
    # A request that makes the worker raise this many times (not a normal 'failed'
    # outcome) is quarantined: dead-lettered, its job failed, the partition moves on.
    compaction_max_worker_failures: int = 3
    # Transient infrastructure errors (database or broker connection loss) are retried
    # with backoff for this long before the service exits and the request is redelivered.
    compaction_transient_retry_s: float = 300.0
    # Jobs one compaction process runs at once; the requests of one session
    # still run one after the other, in offset order.
    compaction_concurrency: int = 4
    # the compaction process's static group membership id. Default: <host>-compaction-<n>,
    # unique per live process and stable across restarts (a slot lock in state_dir).
    compaction_instance_id: str | None = None
    # Local process state (instance slot locks): ALC_STATE_DIR, as deploy/stack.sh uses it.
    state_dir: str = ".state"
    # Prepare waits this long for a compaction commit when the view is over the hard budget.
    compaction_wait_s: float = 20.0
    # Partitions when a topic is created, fixed for its life (docs/scaling.md: how to move
    # to a larger topic). Sized for production; the local dev stack (make) uses 4.
    topic_partitions: int = 24
    topic_replication: int = 1

    processor_id: str = "agentloom-session-processor"
    processor_batch_max: int = 2000
    # faust driver: the longest a buffered event waits for its batch; offloaded (the
    # default), a batch goes as soon as none is being applied (group commit).
    processor_batch_within_s: float = 0.02
    # A batch applies in chunks of this many messages, each chunk's transaction overlapping
    # the next chunk's decoding (streams.processor); one transaction per chunk.
    processor_pipeline_chunk: int = 500
    # Static group membership id of a processor process. Default: <host>-processor-<n>,
    # unique per live process and stable across restarts (a slot lock in state_dir,
    # streams/instance.py); set it to pin one (e.g. a StatefulSet pod name).
    processor_instance_id: str | None = None
    processor_session_timeout_s: float = 10.0
    # Transient infrastructure errors (connection loss, serialization failure, deadlock)
    # are retried with backoff for this long before the processor exits (code 70); a
    # record it cannot apply is dead-lettered instead, never retried.
    processor_transient_retry_s: float = 300.0
    # "faust" (faust-streaming agent) or "aiokafka" (direct batch consumer, higher
    # throughput); both run the same BatchProcessor with the same guarantees.
    processor_driver: Literal["faust", "aiokafka"] = "faust"
    # faust driver: the BatchProcessor runs in a child process (streams.drivers.worker) fed over a
    # pipe, so that faust's per-event stream machinery (~half of a core at full rate) and
    # our decode/plan/commit run on two cores instead of one. Off: in process.
    processor_offload: bool = True
    # With offload: a batch of fewer messages than this, while the child has none, is
    # applied in the faust process (streams.drivers.small_at_home): at an agent
    # runtime's pace the child's pipe and wake-ups cost more than a small batch's work.
    # 1: every batch goes to the child.
    processor_offload_from: int = Field(default=32, ge=1)
    # faust driver: faust's own consumer thread (a loop of its own, every fetch handed
    # across threads) instead of its consumer on the app's loop (streams.drivers.in_loop).
    processor_consumer_thread: bool = False

    prepare_host: str = "127.0.0.1"
    prepare_port: int = 18080
    # Read-your-writes: how long prepare waits for the runtime's last append.
    prepare_commit_wait_s: float = 5.0
    # Prepared contexts are kept in PostgreSQL for any Prepare instance's gateway check
    # ; every instance deletes those older than this.
    prepared_retention_h: float = 24.0
    # What each model call saw (its stored view: diagnostics, the inspector, `agentloom
    # session inspect`; zstd, ~1 KB a call) is kept this long; then the call's view is
    # rebuilt from its records and marked so.
    call_view_retention_h: float = 30 * 24.0
    # How long a Prepare instance uses a model's calibration before reading it again
    # (usage reported to another instance reaches this one within it; R6.4).
    calibration_ttl_s: float = 5.0
    # Store each thread view's render state in PostgreSQL so a cold prepare (after a
    # restart or a deploy, on another instance) continues it instead of rendering from
    # the start: ~3x faster cold prepares, ~0.2 KB per record stored (zstd), rewritten
    # whenever the view grows by a tenth (docs/scaling.md). On by default since the
    # state got small and cheap to read; off trades cold prepares for write volume.
    prepare_render_states: bool = True
    # Render states not saved for this long (finished runs, idle sessions) are deleted by
    # every Prepare instance now and then; such a view renders in full once if it comes back.
    render_state_retention_h: float = 72.0
    # Request bodies over this get 413 payload_too_large, a declared Content-Length before
    # a byte is read; content store uploads (PUT /v1/blobs) have their own bound.
    max_request_bytes: int = 8 * 1024 * 1024
    max_blob_bytes: int = 16 * 1024 * 1024

    # Traces (R18; streams/tracing.py): "none" (default: no exporter, no trace
    # headers read), "console" (spans printed on stdout) or "otlp" (OTLP over HTTP).
    trace_exporter: Literal["none", "console", "otlp"] = "none"
    # The OTLP/HTTP traces URL, path included (http://collector:4318/v1/traces); None: the
    # exporter's own default (OTEL_EXPORTER_OTLP_*, else localhost:4318).
    otlp_endpoint: str | None = None

    # Local .tiktoken file to count with instead of the bundled cl100k_base (R6.4).
    tiktoken_file: str | None = None
    log_level: str = "INFO"
    # Net container allocations between two collections of the youngest generation in
    # every service (streams/tuning/collector.py; CPython's default is 700).
    gc_young_threshold: int = Field(default=20_000, ge=100, le=1_000_000)

    def summarizer_key(self) -> str | None:
        """The summarizer's API key itself (a ``SecretStr`` everywhere else, so that no
        log, repr or error shows it)."""
        return self.summarizer_api_key.get_secret_value() if self.summarizer_api_key else None
