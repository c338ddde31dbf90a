#!/usr/bin/env bash
# deploy/stack.sh — the whole local service stack: PostgreSQL + Kafka.
#
#   deploy/stack.sh up       start both (in parallel), print and write the env lines
#   deploy/stack.sh down     stop both
#   deploy/stack.sh status   exit 0 when both run, 3 otherwise
#
#   deploy/stack.sh up|down|status --brokers 3
#                            the same with a 3-node Kafka cluster (deploy/kafka.sh
#                            --brokers 3: own ports 29092-29094, own state <state>/kafka-3)
#                            instead of the single broker; both can run side by side
#                            and share PostgreSQL, so 'down' of either leaves
#                            PostgreSQL running while the other Kafka still runs.
#                            Env file: <state>/stack-brokers3.env
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

# --brokers N (before or after the command; or ALC_KAFKA_BROKERS=N): 1 = the single
# broker (default).
BROKERS=${ALC_KAFKA_BROKERS:-1}
ARGS=()
while (($#)); do
  case $1 in
    --brokers) [[ $# -ge 2 ]] || { echo "[stack] --brokers needs a number" >&2; exit 64; }
      BROKERS=$2; shift 2 ;;
    --brokers=*) BROKERS=${1#*=}; shift ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
set -- ${ARGS[@]+"${ARGS[@]}"}
ENV_FILE=$ALC_STATE_DIR/stack.env
[[ $BROKERS == 1 ]] || ENV_FILE=$ALC_STATE_DIR/stack-brokers$BROKERS.env

kafka() { bash "$DEPLOY_DIR/kafka.sh" --brokers "$BROKERS" "$@"; }

# The other Kafka of this state dir (the cluster when we are the single broker and
# vice versa) is running: PostgreSQL is shared, so 'down' must leave it up.
other_kafka_running() {
  if [[ $BROKERS == 1 ]]; then
    local d n
    for d in "$ALC_STATE_DIR"/kafka-[0-9]*; do
      [[ -d $d ]] || continue
      n=${d##*/kafka-}
      bash "$DEPLOY_DIR/kafka.sh" --brokers "$n" status >/dev/null 2>&1 && return 0
    done
    return 1
  fi
  bash "$DEPLOY_DIR/kafka.sh" --brokers 1 status >/dev/null 2>&1
}

# Run "deploy/<svc>.sh <cmd>" for postgres and kafka concurrently. Postgres is
# the quick one: its output is printed in one block when it finishes, then
# Kafka's output is streamed live (progress dots included), so lines never mix.
# Returns the first non-zero exit code (postgres first).
run_both() {
  local cmd=$1 pg_cmd=${2:-$1} tmp pg_pid kafka_pid pg_rc=0 kafka_rc=0
  tmp=$(mktemp -d)
  : >"$tmp/kafka.out"
  if [[ $pg_cmd == skip ]]; then
    echo "[stack] PostgreSQL left running: the other Kafka of $ALC_STATE_DIR still uses it" >"$tmp/postgres.out"
    true &
  else
    bash "$DEPLOY_DIR/postgres.sh" "$pg_cmd" >"$tmp/postgres.out" 2>&1 &
  fi
  pg_pid=$!
  kafka "$cmd" >"$tmp/kafka.out" 2>&1 &
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
  if [[ $BROKERS == 1 ]]; then
    echo "ALC_KAFKA_BOOTSTRAP=127.0.0.1:${ALC_KAFKA_PORT:-19092}"
  else
    local i boot="" base=${ALC_KAFKA_CLUSTER_PORT:-29092}
    for ((i = 0; i < BROKERS; i++)); do boot+=${boot:+,}127.0.0.1:$((base + i)); done
    echo "ALC_KAFKA_BOOTSTRAP=$boot"
  fi
  echo "ALC_PG_DSN=postgresql://${ALC_PG_USER:-agentloom}@127.0.0.1:${ALC_PG_PORT:-55432}/${ALC_PG_DB:-agentloom}"
  # Each process queries as its own database login (storage/roles.py), migrations as the
  # owner above.
  echo "ALC_PG_ROLE_LOGINS=1"
  # Authentication (docs/security.md): each process takes its role's principal from
  # the credentials file, and its own bus secret from the secrets directory (Prepare
  # and compaction their signing keys, the processor the verification keys).
  if [[ ${ALC_KAFKA_TLS:-0} == 1 ]]; then
    echo "ALC_KAFKA_SECURITY_PROTOCOL=SASL_SSL"
    echo "ALC_KAFKA_SSL_CAFILE=$ALC_STATE_DIR/secrets/tls/ca.pem"
  else
    echo "ALC_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT"
  fi
  echo "ALC_KAFKA_CREDENTIALS_FILE=$ALC_STATE_DIR/secrets/kafka-users.env"
  echo "ALC_BUS_SECRETS_DIR=$ALC_STATE_DIR/secrets"
}

# Users, topics and ACLs of the default names (streams/kafka/provision.py), as admin.
provision() {
  local py=$REPO/.venv/bin/python
  [[ -x $py ]] || { log "no $py: run 'make setup' first" >&2; return 1; }
  (set -a; eval "$(env_lines)"; cd "$REPO" && "$py" -m streams.kafka.provision)
}

cmd_up() {
  local t0=$SECONDS rc=0
  local what=kafka klogs=$ALC_STATE_DIR/kafka/logs/
  if [[ $BROKERS != 1 ]]; then
    what="a $BROKERS-node kafka cluster"
    klogs="$ALC_STATE_DIR/kafka-$BROKERS/node-*/logs/"
  fi
  log "starting postgres + $what (state in $ALC_STATE_DIR)"
  run_both up || rc=$?
  if ((rc != 0)); then
    log "stack NOT up (exit $rc); logs: $ALC_STATE_DIR/postgres/postgres.log, $klogs" >&2
    exit "$rc"
  fi
  provision || { log "provisioning the broker failed" >&2; exit 1; }
  mkdir -p "$ALC_STATE_DIR"
  env_lines >"$ENV_FILE"
  log "up in $((SECONDS - t0)) s; env written to $ENV_FILE:"
  env_lines
}

cmd_down() {
  local rc=0 pg=down
  other_kafka_running && pg=skip
  run_both down "$pg" || rc=$?
  rm -f "$ENV_FILE"
  exit "$rc"
}

cmd_status() {
  local rc=0
  bash "$DEPLOY_DIR/postgres.sh" status || rc=3
  kafka status || rc=3
  exit "$rc"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *)
    echo "usage: $0 up|down|status [--brokers 1|3]" >&2
    exit 64
    ;;
esac
