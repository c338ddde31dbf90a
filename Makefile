# AgentLoom Context — every set-up step lives in deploy/*.sh and is idempotent.
PY := .venv/bin/python
JUNIT := build/test-results/junit.xml
JUNIT_UNIT := build/test-results/junit-unit.xml
CHECKS_LOG := build/test-results/checks.log
SOAK_SECONDS ?= 300
SCALE_SECONDS ?= 100

# The local single-broker stack: 4 partitions a topic (the library default, 24, is sized
# for production; tests create many topics). Set it to override.
export ALC_TOPIC_PARTITIONS ?= 4

.DEFAULT_GOAL := help
.PHONY: help setup up down status demo serve probe test lint typecheck unit bench gate soak clean peer-tests test-scale

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

setup: ## Install what is missing: Python env (.venv), Kafka jars (Maven); `up` adds PostgreSQL (apt)
	@bash deploy/bootstrap.sh
	@bash deploy/kafka.sh libs

up: setup ## Start Kafka (KRaft) and PostgreSQL on this machine
	@bash deploy/stack.sh up

down: ## Stop Kafka and PostgreSQL
	@bash deploy/stack.sh down

status: ## Show whether Kafka and PostgreSQL run
	@bash deploy/stack.sh status

serve: up ## Every service in the foreground (Prepare, processor, compaction, analytics, console), a dev key and the URLs; Ctrl-C stops them
	@$(PY) -m services.cli serve --no-stack

demo: up ## Main job: run every service and drive a 3-question agent session through them
	@$(PY) -m devstack.demo

probe: setup ## Hostile-tenant probe of the running services (`make serve`): tenant B's keys and login against a tenant A over the bus, HTTP and console; table + build/probe/hostile.json, exit 1 on any finding
	@$(PY) -m devstack.hostile_probe

lint: setup ## ruff lint + format check
	@$(PY) -m ruff check .
	@$(PY) -m ruff format --check .

typecheck: setup ## mypy (strict) on our packages
	@$(PY) -m mypy

unit: setup ## Unit tests only (no services)
	@$(PY) -m pytest tests/unit -q

client-check: setup ## A client generated from docs/openapi.json type-checks tests/client_check/program.py
	@bash tests/client_check/run.sh

# The unit tests (CPU-bound, ~1 min, no services) run beside the checks (a cold mypy is
# a core for ~40 s; the checks' output is kept and printed after the unit tests'), then
# everything else against the real stack. Each pytest runs on TEST_WORKERS processes
# (pytest-xdist; 0: in one process): the tests against the stack wait on it half of the
# time, so two workers take ~5 min where one takes ~8 on our 2-core machines. A test
# module runs whole on one worker (--dist loadfile: its module fixtures start once);
# each worker has its own database and services (tests/conftest.py). Either failing
# fails the target.
TEST_WORKERS ?= 2
test: setup ## ruff + mypy + the generated-client check beside the unit tests, then all other tests against the real stack; JUnit XML in build/test-results/
	@mkdir -p $(dir $(JUNIT))
	@$(MAKE) --no-print-directory -j3 lint typecheck client-check >$(CHECKS_LOG) 2>&1 & checks=$$!; \
	$(PY) -m pytest tests/unit -ra -n $(TEST_WORKERS) --junitxml=$(JUNIT_UNIT); unit=$$?; \
	wait $$checks; rc=$$?; cat $(CHECKS_LOG); \
	if [ $$rc -ne 0 ]; then echo "[test] lint/typecheck/client-check FAILED (exit $$rc, above)"; fi; \
	$(PY) -m pytest -ra -n $(TEST_WORKERS) --dist loadfile --junitxml=$(JUNIT) --ignore=tests/unit; tests=$$?; \
	$(PY) -m tests.support.junit_merge $(JUNIT_UNIT) $(JUNIT); \
	for code in $$unit $$rc $$tests; do if [ $$code -ne 0 ]; then exit $$code; fi; done

bench: up ## Benchmarks: ingest per driver vs ceilings, prepare latency (warm, cold), compaction cost and jobs/s (1, 2 workers), a 1,000-question session, summary fidelity, the execution frontier (and phrasing-blind, en/zh), public agent transcripts, analytics, the cost of a session under three context policies, K agents sharing one runtime (CPU per step per process), saturated and with a 500 ms model; one summary table last (build/bench)
	@$(PY) -m benchmarks.run
	@$(PY) -m benchmarks.ingest_floor
	@$(PY) -m benchmarks.compaction
	@$(PY) -m benchmarks.compaction_throughput
	@$(PY) -m benchmarks.prepare_scale
	@$(PY) -m benchmarks.prepare_cold
	@$(PY) -m benchmarks.long_session
	@$(PY) -m benchmarks.summary_fidelity
	@$(PY) -m benchmarks.analytics
	@$(PY) -m benchmarks.frontier
	@$(PY) -m benchmarks.frontier_blind
	@$(PY) -m benchmarks.real_transcripts
	@$(PY) -m benchmarks.cost
	@$(PY) -m benchmarks.agents --model-ms 0,500
	@$(PY) -m benchmarks.summary

gate: up ## Regression gate (issue 37): HEAD against the last landed commit (.ci/gate-baseline), 2 alternating rounds of benchmarks.gate_probe; fails on a measure > 25% worse beyond the noise (build/bench/gate.json)
	@$(PY) -m benchmarks.compare --gate

soak: up ## Reliability soak: load + kill -9 of every service, Kafka/PG restarts; SOAK_SECONDS=300 (build/soak)
	@$(PY) -m benchmarks.soak --seconds $(SOAK_SECONDS)

test-scale: setup ## Scale test: 3 processors, 2 Prepare, 2 compaction workers on a 3-broker cluster (RF 3), kill -9 of a broker, a processor, a Prepare (build/scale)
	@bash deploy/postgres.sh up
	@$(PY) -m benchmarks.scale --seconds $(SCALE_SECONDS)

peer-tests: setup ## The openai-agents and langchain sdists' own tests with ours substituted (real stack); per-file summary
	@bash deploy/peer-tests.sh

clean: down ## Stop the stack and remove local state (.state, build)
	rm -rf .state build
