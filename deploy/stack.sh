#!/usr/bin/env bash
# deploy/stack.sh — the whole local service stack: PostgreSQL + Kafka.
#
#   deploy/stack.sh up       start both (in parallel), print and write the env lines
#   deploy/stack.sh down     stop both
#   deploy/stack.sh status   exit 0 when both run, 3 otherwise
#
# After 'up' the connection settings are in ${ALC_STATE_DIR:-<repo>/.state}/stack.env:
#   ALC_KAFKA_BOOTSTRAP=127.0.0.1:19092
#   ALC_PG_DSN=postgresql://agentloom@127.0.0.1:55432/agentloom
# Load them with:  set -a; . .state/stack.env; set +a
# All ALC_* variables of deploy/kafka.sh and deploy/postgres.sh apply.
set -euo pipefail

DEPLOY_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$DEPLOY_DIR/.." && pwd)
ALC_STATE_DIR=$(realpath -m "${ALC_STATE_DIR:-$REPO/.state}")
export ALC_STATE_DIR

log() { echo "[stack] $*"; }

# Run "deploy/<svc>.sh <cmd>" for postgres and kafka concurrently. Postgres is
# the quick one: its output is printed in one block when it finishes, then
# Kafka's output is streamed live (progress dots included), so lines never mix.
# Returns the first non-zero exit code (postgres first).
run_both() {
  local cmd=$1 tmp pg_pid kafka_pid pg_rc=0 kafka_rc=0
  tmp=$(mktemp -d)
  : >"$tmp/kafka.out"
  bash "$DEPLOY_DIR/postgres.sh" "$cmd" >"$tmp/postgres.out" 2>&1 &
  pg_pid=$!
  bash "$DEPLOY_DIR/kafka.sh" "$cmd" >"$tmp/kafka.out" 2>&1 &
  kafka_pid=$!
  wait "$pg_pid" || pg_rc=$?
  cat "$tmp/postgres.out"
  tail -n +1 -s 0.2 -f --pid="$kafka_pid" "$tmp/kafka.out"
  wait "$kafka_pid" || kafka_rc=$?
  rm -rf "$tmp"
  ((pg_rc != 0)) && log "postgres $cmd failed (exit $pg_rc)" >&2
  ((kafka_rc != 0)) && log "kafka $cmd failed (exit $kafka_rc)" >&2
  if ((pg_rc != 0)); then return "$pg_rc"; fi
  return "$kafka_rc"
}

env_lines() {
  echo "ALC_KAFKA_BOOTSTRAP=127.0.0.1:${ALC_KAFKA_PORT:-19092}"
  echo "ALC_PG_DSN=postgresql://${ALC_PG_USER:-agentloom}@127.0.0.1:${ALC_PG_PORT:-55432}/${ALC_PG_DB:-agentloom}"
}

cmd_up() {
  local t0=$SECONDS rc=0
  log "starting postgres + kafka (state in $ALC_STATE_DIR)"
  run_both up || rc=$?
  if ((rc != 0)); then
    log "stack NOT up (exit $rc); logs: $ALC_STATE_DIR/postgres/postgres.log, $ALC_STATE_DIR/kafka/logs/" >&2
    exit "$rc"
  fi
  mkdir -p "$ALC_STATE_DIR"
  env_lines >"$ALC_STATE_DIR/stack.env"
  log "up in $((SECONDS - t0)) s; env written to $ALC_STATE_DIR/stack.env:"
  env_lines
}

cmd_down() {
  local rc=0
  run_both down || rc=$?
  rm -f "$ALC_STATE_DIR/stack.env"
  exit "$rc"
}

cmd_status() {
  local rc=0
  bash "$DEPLOY_DIR/postgres.sh" status || rc=3
  bash "$DEPLOY_DIR/kafka.sh" status || rc=3
  exit "$rc"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *)
    echo "usage: $0 up|down|status" >&2
    exit 64
    ;;
esac
