#!/usr/bin/env bash
# deploy/kafka.sh — a real single-node Apache Kafka 4.1.1 broker (KRaft,
# combined broker+controller) run from Maven Central jars, no Docker needed.
#
#   deploy/kafka.sh up       fetch jars if needed, format storage once, start, wait until an API call works
#   deploy/kafka.sh down     SIGTERM (30 s grace), then SIGKILL
#   deploy/kafka.sh status   exit 0 when running, 3 when not
#   deploy/kafka.sh libs     only fetch the jars into .cache/kafka/libs
#   deploy/kafka.sh tool CLASS [ARGS...]
#                            run a Kafka CLI class with the fetched jars, e.g.
#                            org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:19092 --list
#
# A replicated cluster beside it (issue 13): N >= 3 combined broker+controller nodes,
# a static quorum of all N, replication factor 3, min.insync.replicas=2, in its own
# state dir (<state>/kafka-N) on its own ports (clients 29092.., controllers 29192..):
#   deploy/kafka.sh --brokers 3 up|down|status
#   deploy/kafka.sh kill-node I     SIGKILL node I of the cluster (crash test)
#   deploy/kafka.sh stop-node I     SIGTERM node I (30 s grace, then SIGKILL)
#   deploy/kafka.sh start-node I    start node I again and wait until it answers
# (the node commands take --brokers N too; default 3). ALC_KAFKA_BROKERS=N = --brokers N.
#
# Env: ALC_STATE_DIR (default <repo>/.state), ALC_KAFKA_PORT (19092),
#      ALC_KAFKA_CONTROLLER_PORT (19093), ALC_KAFKA_HEAP ("-Xms256m -Xmx768m"),
#      ALC_KAFKA_START_TIMEOUT (seconds, 180: a broker loads every partition's log
#      at start, and a dev state that ran the tests for weeks holds thousands); for the cluster
#      ALC_KAFKA_CLUSTER_PORT (29092, node I listens on +I-1),
#      ALC_KAFKA_CLUSTER_CONTROLLER_PORT (29192, likewise),
#      ALC_KAFKA_CLUSTER_HEAP ("-Xms128m -Xmx512m", per node),
#      ALC_STACK_CPU (batch: the broker under SCHED_BATCH; deploy/cpu-policy.sh).
# Exit codes: 0 ok, 1 failure, 2 port taken by something else, 3 not running (status).
set -euo pipefail

DEPLOY_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=deploy/cpu-policy.sh
source "$DEPLOY_DIR/cpu-policy.sh"
REPO=$(cd "$DEPLOY_DIR/.." && pwd)
STATE_DIR=$(realpath -m "${ALC_STATE_DIR:-$REPO/.state}")
KSTATE=$STATE_DIR/kafka
LIBS=$REPO/.cache/kafka/libs
POM=$DEPLOY_DIR/kafka/pom.xml
LOG4J_BROKER=$DEPLOY_DIR/kafka/log4j2.properties
LOG4J_TOOLS=$DEPLOY_DIR/kafka/log4j2-tools.properties

PORT=${ALC_KAFKA_PORT:-19092}
CONTROLLER_PORT=${ALC_KAFKA_CONTROLLER_PORT:-19093}
HEAP=${ALC_KAFKA_HEAP:--Xms256m -Xmx768m}
START_TIMEOUT=${ALC_KAFKA_START_TIMEOUT:-180}
HOST=127.0.0.1
BOOTSTRAP=$HOST:$PORT

CONF=$KSTATE/server.properties
DATA=$KSTATE/data
LOGDIR=$KSTATE/logs
OUT=$LOGDIR/kafka.out          # the JVM's stdout/stderr
SERVER_LOG=$LOGDIR/server.log  # log4j output
PIDFILE=$KSTATE/kafka.pid
STAMP=$LIBS/.pom.sha256

# Authentication (docs/security.md): SASL SCRAM-SHA-512 for clients and between
# brokers, PLAIN between controllers, the StandardAuthorizer with ACLs. One principal
# per service and the runtime; passwords are generated once into $SECRETS (mode 700)
# and shared by the single broker and the cluster. Users other than admin, and the
# ACLs, are provisioned by `python -m streams.kafka.provision` (stack.sh).
# The bus's secrets (streams/kafka/bus_secrets.py), generated once as the operator's
# provisioning step, each process reading only its own: a signing key per signing
# service (bus-prepare.key, bus-compaction.key), the processor's verification keys
# (bus-verify.env: "service=key" lines), and the key issuer secret (key-issuer.key:
# the processor and agentloom-keys). No password goes on a command line: the tools
# read them from files or the environment.
# ALC_KAFKA_TLS=1: the client listener is SASL_SSL with a self-signed certificate for
# 127.0.0.1 ($SECRETS/tls/ca.pem is what clients trust).
SECRETS=$STATE_DIR/secrets
USERS_FILE=$SECRETS/kafka-users.env
SIGNING_SERVICES=(prepare compaction)
VERIFY_KEYS=$SECRETS/bus-verify.env
ISSUER_KEY=$SECRETS/key-issuer.key
TLS_DIR=$SECRETS/tls
TLS=${ALC_KAFKA_TLS:-0}
USERS=(admin controller processor compaction prepare analytics cli runtime)
ADMIN_CONFIG=$SECRETS/admin.properties

# --- cluster mode (--brokers N, N >= 3) ---------------------------------------
# The single broker above stays exactly as it was; a cluster only swaps these
# globals per node (use_node), so every helper below serves both.
BROKERS=${ALC_KAFKA_BROKERS:-1}
BROKERS_GIVEN=0
[[ -n ${ALC_KAFKA_BROKERS:-} ]] && BROKERS_GIVEN=1
ARGS=()
while (($#)); do
  case $1 in
    --brokers) [[ $# -ge 2 ]] || { echo "[kafka] ERROR: --brokers needs a number" >&2; exit 64; }
      BROKERS=$2; BROKERS_GIVEN=1; shift 2 ;;
    --brokers=*) BROKERS=${1#*=}; BROKERS_GIVEN=1; shift ;;
    tool) ARGS+=("$@"); break ;;  # everything after 'tool' belongs to the CLI class
    *) ARGS+=("$1"); shift ;;
  esac
done
set -- ${ARGS[@]+"${ARGS[@]}"}
# Node commands only make sense for a cluster: without --brokers they mean 3.
[[ ${1:-} == *-node && $BROKERS_GIVEN == 0 ]] && BROKERS=3
if ! [[ $BROKERS =~ ^[0-9]+$ ]] || ((BROKERS == 2 || BROKERS == 0 || BROKERS > 9)); then
  echo "[kafka] ERROR: --brokers must be 1 or 3..9 (RF 3 with min.insync.replicas=2 needs 3), got '$BROKERS'" >&2
  exit 64
fi
CLUSTER_PORT=${ALC_KAFKA_CLUSTER_PORT:-29092}
CLUSTER_CONTROLLER_PORT=${ALC_KAFKA_CLUSTER_CONTROLLER_PORT:-29192}
CLUSTER_DIR=$STATE_DIR/kafka-$BROKERS
CLUSTER_ID_FILE=$CLUSTER_DIR/cluster.id
CLUSTER_BOOTSTRAP=
for ((i = 0; i < BROKERS; i++)); do
  CLUSTER_BOOTSTRAP+=${CLUSTER_BOOTSTRAP:+,}$HOST:$((CLUSTER_PORT + i))
done
NODE=0  # 0: the cluster as a whole (log prefix)

# Point the per-broker globals at node $1 of the cluster.
use_node() {
  NODE=$1
  KSTATE=$CLUSTER_DIR/node-$NODE
  PORT=$((CLUSTER_PORT + NODE - 1))
  CONTROLLER_PORT=$((CLUSTER_CONTROLLER_PORT + NODE - 1))
  HEAP=${ALC_KAFKA_CLUSTER_HEAP:--Xms128m -Xmx512m}
  BOOTSTRAP=$HOST:$PORT
  CONF=$KSTATE/server.properties
  DATA=$KSTATE/data
  LOGDIR=$KSTATE/logs
  OUT=$LOGDIR/kafka.out
  SERVER_LOG=$LOGDIR/server.log
  PIDFILE=$KSTATE/kafka.pid
}

tag() {
  if ((BROKERS == 1)); then echo kafka
  elif ((NODE == 0)); then echo "kafka-cluster"
  else echo "kafka-node$NODE"; fi
}
log() { echo "[$(tag)] $*"; }
err() { echo "[$(tag)] ERROR: $*" >&2; }
die() { err "$*"; exit 1; }

# --- helpers -----------------------------------------------------------------

port_open() { # is anything accepting TCP connections on 127.0.0.1:$1 ?
  timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null
}

# pid of *our* broker (the java process running kafka.Kafka with our config), or nothing.
broker_pid() {
  local pid
  if [[ -s $PIDFILE ]]; then
    pid=$(<"$PIDFILE")
    if is_our_broker "$pid"; then echo "$pid"; return 0; fi
  fi
  # Pid file lost? Look for a process whose command line names our exact config file.
  local d
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    if is_our_broker "$pid"; then echo "$pid"; return 0; fi
  done 2>/dev/null
  return 1
}

is_our_broker() {
  local pid=$1 cmd
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
  [[ $cmd == *" kafka.Kafka $CONF"* ]]
}

# Alive and not a zombie (a container's PID 1 may be slow to reap orphans, and
# kill -0 succeeds on zombies).
pid_alive() {
  local st
  { read -r st <"/proc/$1/stat"; } 2>/dev/null || return 1
  st=${st##*) }
  [[ ${st%% *} != Z ]]
}

jar_count() { compgen -G "$LIBS/*.jar" | wc -l; }

pom_hash() { sha256sum "$POM" | cut -d' ' -f1; }

libs_ok() {
  [[ -f $STAMP && "$(<"$STAMP")" == "$(pom_hash)" ]] &&
    compgen -G "$LIBS/kafka_2.13-*.jar" >/dev/null &&
    compgen -G "$LIBS/kafka-tools-*.jar" >/dev/null
}

ensure_libs() {
  if libs_ok; then
    log "jars up to date ($(jar_count) in ${LIBS#"$REPO"/})"
    return 0
  fi
  command -v mvn >/dev/null || die "mvn not found; install Maven (apt-get install -y maven) and Java 17"
  command -v java >/dev/null || die "java not found; install a JDK >= 17 (apt-get install -y openjdk-17-jdk-headless)"
  log "fetching Kafka jars from Maven Central ($(basename "$POM") changed or no cache) ..."
  local tmp=$LIBS.tmp.$$ t0=$SECONDS
  rm -rf "$tmp"
  mkdir -p "$(dirname "$LIBS")"
  # (sed strips the stray ANSI resets Maven 3.8 prints even in batch mode)
  if ! mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
      -DoutputDirectory="$tmp" -DincludeScope=runtime 2>&1 |
      sed -u -e 's/\x1b\[[0-9;]*m//g' -e '/^[[:space:]]*$/d'; then
    rm -rf "$tmp"
    die "mvn dependency:copy-dependencies failed (see output above)"
  fi
  pom_hash >"$tmp/.pom.sha256"
  rm -rf "$LIBS"          # drop jars of an older pom
  mv "$tmp" "$LIBS"
  log "fetched $(jar_count) jars into ${LIBS#"$REPO"/} in $((SECONDS - t0)) s"
}

# Run a Kafka CLI class with small-JVM settings (fast start-up, quiet logging).
kafka_tool() {
  java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto \
    -Dlog4j2.configurationFile="$LOG4J_TOOLS" -cp "$LIBS/*" "$@"
}

# The same for a class whose arguments carry a secret: they go in a java argument file
# (mode 600 in $SECRETS, removed after), which the java launcher expands, so that no
# password is on a command line (ps shows "@<file>").
kafka_tool_secret_args() {
  local args rc=0 a
  args=$(mktemp "$SECRETS/.args.XXXXXX")
  for a in "$@"; do
    a=${a//\\/\\\\}
    printf '"%s"\n' "${a//\"/\\\"}"
  done >"$args"
  kafka_tool "@$args" || rc=$?
  rm -f "$args"
  return "$rc"
}

client_protocol() { if [[ $TLS == 1 ]]; then echo SASL_SSL; else echo SASL_PLAINTEXT; fi; }

rand_hex() { od -vAn -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

password_of() { sed -n "s/^$1=//p" "$USERS_FILE"; }

# Passwords, the bus's secrets and (TLS) the broker certificate, once.
ensure_secrets() {
  mkdir -p "$SECRETS"
  chmod 700 "$SECRETS"
  exec 8>"$SECRETS/.lock"
  flock -w 60 8 || die "another deploy/kafka.sh holds $SECRETS/.lock"
  (umask 077; touch "$USERS_FILE")
  local u
  for u in "${USERS[@]}"; do
    grep -q "^$u=" "$USERS_FILE" || echo "$u=$(rand_hex 24)" >>"$USERS_FILE"
  done
  ensure_bus_secrets
  if [[ $TLS == 1 ]]; then ensure_tls; fi
  write_admin_config
  exec 8>&-
}

# One signing key per signing service, independent (none derived from another), the
# processor's verification keys written from them once (a rotation edits that file:
# docs/security.md), and the key issuer secret.
ensure_bus_secrets() {
  local s
  for s in "${SIGNING_SERVICES[@]}"; do
    [[ -s $SECRETS/bus-$s.key ]] || (umask 077; rand_hex 32 >"$SECRETS/bus-$s.key")
  done
  [[ -s $ISSUER_KEY ]] || (umask 077; rand_hex 32 >"$ISSUER_KEY")
  [[ -s $VERIFY_KEYS ]] && return 0
  (umask 077; for s in "${SIGNING_SERVICES[@]}"; do
    echo "$s=$(cat "$SECRETS/bus-$s.key")"
  done >"$VERIFY_KEYS")
}

ensure_tls() {
  [[ -s $TLS_DIR/broker.p12 && -s $TLS_DIR/ca.pem ]] && return 0
  command -v keytool >/dev/null || die "keytool not found (part of the JDK) for ALC_KAFKA_TLS=1"
  mkdir -p "$TLS_DIR"
  # keytool reads the store password from its environment (-storepass:env), never
  # from its command line, which every local user can read in ps.
  local ALC_KEYSTORE_PW
  ALC_KEYSTORE_PW=$(password_of admin)
  export ALC_KEYSTORE_PW
  rm -f "$TLS_DIR/broker.p12"
  keytool -genkeypair -alias broker -keyalg RSA -keysize 2048 -validity 3650 \
    -dname "CN=localhost" -ext "SAN=ip:$HOST,dns:localhost" -storetype PKCS12 \
    -keystore "$TLS_DIR/broker.p12" -storepass:env ALC_KEYSTORE_PW \
    -keypass:env ALC_KEYSTORE_PW >/dev/null 2>&1 || die "keytool -genkeypair failed"
  keytool -exportcert -rfc -alias broker -keystore "$TLS_DIR/broker.p12" \
    -storepass:env ALC_KEYSTORE_PW -file "$TLS_DIR/ca.pem" >/dev/null 2>&1 ||
    die "keytool -exportcert failed"
  unset ALC_KEYSTORE_PW
  log "TLS: self-signed certificate for $HOST in ${TLS_DIR#"$REPO"/}"
}

# The Kafka CLI tools' client config for the admin principal (api_ready, `tool`).
write_admin_config() {
  (umask 077; {
    echo "security.protocol=$(client_protocol)"
    echo "sasl.mechanism=SCRAM-SHA-512"
    echo "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"$(password_of admin)\";"
    if [[ $TLS == 1 ]]; then
      echo "ssl.truststore.type=PEM"
      echo "ssl.truststore.location=$TLS_DIR/ca.pem"
    fi
  } >"$ADMIN_CONFIG")
}

# Listener, SASL and authorizer settings shared by the single broker and the cluster.
render_auth() {
  local proto admin_pw ctl_pw
  proto=$(client_protocol)
  admin_pw=$(password_of admin)
  ctl_pw=$(password_of controller)
  cat <<EOF
advertised.listeners=CLIENT://$HOST:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=CLIENT
listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,CLIENT:$proto
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
sasl.mechanism.controller.protocol=PLAIN
listener.name.client.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.client.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin_pw";
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="controller" password="$ctl_pw" user_controller="$ctl_pw";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:controller
allow.everyone.if.no.acl.found=false
EOF
  if [[ $TLS == 1 ]]; then
    cat <<EOF
listener.name.client.ssl.keystore.type=PKCS12
listener.name.client.ssl.keystore.location=$TLS_DIR/broker.p12
listener.name.client.ssl.keystore.password=$admin_pw
listener.name.client.ssl.key.password=$admin_pw
listener.name.client.ssl.truststore.type=PEM
listener.name.client.ssl.truststore.location=$TLS_DIR/ca.pem
EOF
  fi
}

render_config() {
  if ((BROKERS > 1)); then render_cluster_config; return; fi
  render_auth
  cat <<EOF
# Generated by deploy/kafka.sh on every 'up' — edit the script, not this file.
# Single-node KRaft: this process is both broker and (the only) controller.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CONTROLLER_PORT
listeners=CLIENT://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT
log.dirs=$DATA

num.partitions=4
default.replication.factor=1
min.insync.replicas=1
# Topics are ours: every service creates or validates its topics at start
# (streams/kafka/topics.py). A topic the broker would create on first use hides a missing
# creation step and gets the broker's defaults instead of our partition count.
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0

# Internal topics must fit on one broker.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1

# After a crash (kill -9) the restarted node must wait for its old broker
# session to expire (DUPLICATE_BROKER_REGISTRATION); the default 9 s session
# made a crash-restart take ~15 s.
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=5000
# The controller writes a no-op record to the metadata log this often when nothing else
# changed (KIP-835; default 500 ms): each one is appended, flushed and replayed by the
# broker half of this process. An idle single node spent ~14 ms of CPU a second on them
# at 500 ms and ~5 at 5 s (issue 37: the broker's cost at low load).
metadata.max.idle.interval.ms=5000

# Modest footprint for a dev/CI machine.
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
log.retention.hours=168
log.segment.bytes=268435456
EOF
}

# One node of the replicated cluster: every node is a voter of the static quorum
# and a broker; replication factor 3 with min.insync.replicas=2 keeps acks=all
# writes available while any one node is down.
render_cluster_config() {
  local voters="" i
  for ((i = 1; i <= BROKERS; i++)); do
    voters+=${voters:+,}$i@$HOST:$((CLUSTER_CONTROLLER_PORT + i - 1))
  done
  render_auth
  cat <<EOF
# Generated by deploy/kafka.sh --brokers $BROKERS on every 'up'/'start-node' —
# edit the script, not this file. Node $NODE of a $BROKERS-node KRaft cluster
# (combined broker+controller).
process.roles=broker,controller
node.id=$NODE
controller.quorum.voters=$voters
listeners=CLIENT://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT
log.dirs=$DATA

num.partitions=4
default.replication.factor=3
# acks=all succeeds with one node down, fails (NOT_ENOUGH_REPLICAS) with two.
min.insync.replicas=2
unclean.leader.election.enable=false
# As for the single broker: services create their topics themselves.
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0

offsets.topic.replication.factor=3
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2

# A killed node is fenced (and leaves every ISR) once its 5 s session expires;
# the same short session lets it re-register quickly after a restart.
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=5000

# Three JVMs share a small machine.
num.network.threads=2
num.io.threads=2
num.replica.fetchers=1
num.recovery.threads.per.data.dir=1
log.retention.hours=168
log.segment.bytes=134217728
EOF
}

# All nodes must be formatted with the same cluster id; the first format picks it.
shared_cluster_id() {
  if [[ ! -s $CLUSTER_ID_FILE ]]; then
    local id
    id=$(kafka_tool kafka.tools.StorageTool random-uuid) || die "StorageTool random-uuid failed"
    echo "$id" >"$CLUSTER_ID_FILE"
  fi
  cat "$CLUSTER_ID_FILE"
}

write_config() {
  local tmp=$CONF.tmp
  (umask 077; render_config >"$tmp")
  if [[ -f $CONF ]] && cmp -s "$tmp" "$CONF"; then
    rm -f "$tmp"
  else
    [[ -f $CONF ]] && log "server.properties changed; rewriting ${CONF}"
    mv "$tmp" "$CONF"
  fi
}

# Storage formatted before authentication has no SCRAM credential for admin (the
# brokers authenticate to each other as admin): a local dev broker is formatted again.
AUTH_STAMP=.alc-auth-v1
format_storage() {
  if [[ -f $DATA/meta.properties && -f $DATA/$AUTH_STAMP ]]; then
    return 0
  fi
  if [[ -f $DATA/meta.properties ]]; then
    log "storage in $DATA predates authentication: formatting it again (local topics are dropped)"
    rm -rf "$DATA"
  fi
  local cluster_id
  if ((BROKERS > 1)); then
    cluster_id=$(shared_cluster_id) || exit 1
  else
    cluster_id=$(kafka_tool kafka.tools.StorageTool random-uuid) ||
      die "StorageTool random-uuid failed"
  fi
  log "formatting storage in $DATA (cluster id $cluster_id)"
  # With a static controller.quorum.voters, Kafka 4.1 formats without
  # --standalone / --initial-controllers (those are for the dynamic quorum
  # configured with controller.quorum.bootstrap.servers).
  kafka_tool_secret_args kafka.tools.StorageTool format -t "$cluster_id" -c "$CONF" \
    --add-scram "SCRAM-SHA-512=[name=admin,password=$(password_of admin)]" >>"$OUT" 2>&1 || {
    tail -n 20 "$OUT" >&2
    die "StorageTool format failed (output in $OUT)"
  }
  touch "$DATA/$AUTH_STAMP"
}

# Real API round trip: the admin client lists topics (a Metadata request).
api_ready() {
  local cfg=$KSTATE/admin-probe.properties
  (umask 077; {
    cat "$ADMIN_CONFIG"
    printf '%s\n' request.timeout.ms=4000 default.api.timeout.ms=5000 \
      socket.connection.setup.timeout.ms=2000 socket.connection.setup.timeout.max.ms=2000
  } >"$cfg")
  timeout 20 java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto \
    -Dlog4j2.configurationFile="$LOG4J_TOOLS" -cp "$LIBS/*" \
    org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" \
    --command-config "$cfg" --list >/dev/null 2>"$KSTATE/admin-probe.err"
}

show_logs() {
  local f
  for f in "$OUT" "$SERVER_LOG"; do
    [[ -s $f ]] || continue
    echo "---- last lines of $f ----" >&2
    tail -n 25 "$f" >&2
  done
  [[ -s $KSTATE/admin-probe.err ]] && {
    echo "---- last admin probe error ----" >&2
    tail -n 5 "$KSTATE/admin-probe.err" >&2
  }
  return 0
}

wait_ready() {
  local pid=$1 t0=$SECONDS deadline=$((SECONDS + START_TIMEOUT))
  printf '[%s] waiting for %s to answer an admin request ' "$(tag)" "$BOOTSTRAP"
  while ((SECONDS < deadline)); do
    if ! pid_alive "$pid"; then
      echo
      show_logs
      rm -f "$PIDFILE"
      die "broker process $pid exited during start-up"
    fi
    if port_open "$PORT" && api_ready; then
      echo " ok"
      log "ready at $BOOTSTRAP (pid $pid, $((SECONDS - t0)) s after launch)"
      return 0
    fi
    printf '.'
    sleep 0.5
  done
  echo
  show_logs
  local parts
  parts=$(find "$KSTATE" -mindepth 2 -maxdepth 3 -type d -name '*-[0-9]*' 2>/dev/null | wc -l)
  die "broker (pid $pid) not ready after ${START_TIMEOUT} s ($parts partition directories to load; raise ALC_KAFKA_START_TIMEOUT); it is still running — 'deploy/kafka.sh down' to stop it"
}

# --- commands ----------------------------------------------------------------

cmd_up() {
  mkdir -p "$KSTATE" "$LOGDIR"
  exec 9>"$KSTATE/.lock"
  flock -w 120 9 || die "another deploy/kafka.sh holds $KSTATE/.lock for over 120 s"
  ensure_secrets

  local pid
  if pid=$(broker_pid); then
    echo "$pid" >"$PIDFILE"
    if render_config | cmp -s - "$CONF"; then
      if port_open "$PORT"; then
        log "already running (pid $pid) at $BOOTSTRAP"
        return 0
      fi
      log "broker process $pid exists but $BOOTSTRAP does not answer yet"
      [[ -d $LIBS ]] || die "jar cache $LIBS missing while broker $pid runs"
      wait_ready "$pid"
      return 0
    fi
    # The broker reads server.properties only at start (and settings such as
    # auto.create.topics.enable cannot be changed at runtime): an 'up' after the
    # generated config changed restarts it, so a re-run always leaves the broker on the
    # current settings. Clients reconnect; committed data stays in $DATA.
    log "server.properties changed since broker $pid started; restarting it to apply"
    stop_broker "$pid"
  fi
  rm -f "$PIDFILE"

  local p var
  for p in "$PORT:ALC_KAFKA_PORT" "$CONTROLLER_PORT:ALC_KAFKA_CONTROLLER_PORT"; do
    var=${p#*:}; p=${p%%:*}
    if port_open "$p"; then
      err "port $HOST:$p is already in use by another process (not our broker)."
      err "Stop that process or pick another port: export $var=<free port>"
      command -v ss >/dev/null && ss -ltnpH "sport = :$p" 2>/dev/null | sed 's/^/[kafka]   /' >&2 || true
      exit 2
    fi
  done

  ensure_libs
  write_config
  format_storage

  launch_broker
  wait_ready "$LAUNCHED_PID"
}

# Start the java process for the current globals; its pid goes to LAUNCHED_PID
# and the pid file. The caller holds the lock.
launch_broker() {
  local pid
  log "starting broker (KRaft broker+controller) on $BOOTSTRAP, controller $HOST:$CONTROLLER_PORT"
  log "logs: $SERVER_LOG (stdout/stderr: $OUT)"
  # shellcheck disable=SC2086,SC2046  # HEAP is a list of JVM flags; the policy's words
  (
    exec 9>&-   # do not leak the lock into the broker
    cd "$KSTATE"
    exec setsid nohup $(cpu_policy_prefix) java $HEAP -server \
      -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
      -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true \
      -Dkafka.logs.dir="$LOGDIR" -Dlog4j2.configurationFile="$LOG4J_BROKER" \
      -cp "$LIBS/*" kafka.Kafka "$CONF" </dev/null >>"$OUT" 2>&1
  ) &
  pid=$!
  echo "$pid" >"$PIDFILE"
  LAUNCHED_PID=$pid
}

cmd_down() {
  mkdir -p "$KSTATE"
  exec 9>"$KSTATE/.lock"
  flock -w 120 9 || die "another deploy/kafka.sh holds $KSTATE/.lock for over 120 s"

  local pid
  if ! pid=$(broker_pid); then
    rm -f "$PIDFILE"
    log "not running"
    return 0
  fi
  stop_broker "$pid"
}

# SIGTERM (30 s grace), then SIGKILL; the caller holds the lock.
stop_broker() {
  local pid=$1
  log "stopping broker (pid $pid) ..."
  kill -TERM "$pid" 2>/dev/null || true
  local t0=$SECONDS
  while pid_alive "$pid" && ((SECONDS - t0 < 30)); do sleep 0.5; done
  if pid_alive "$pid"; then
    log "still running after 30 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while pid_alive "$pid"; do sleep 0.2; done
  fi
  rm -f "$PIDFILE"
  log "stopped (in $((SECONDS - t0)) s)"
}

cmd_status() {
  local pid
  if pid=$(broker_pid); then
    if port_open "$PORT"; then
      log "running (pid $pid), bootstrap $BOOTSTRAP"
      return 0
    fi
    log "starting or unhealthy (pid $pid), $BOOTSTRAP not answering"
    return 3
  fi
  log "stopped (bootstrap would be $BOOTSTRAP)"
  return 3
}

# --- cluster commands (--brokers N) -------------------------------------------

cluster_lock() {
  mkdir -p "$CLUSTER_DIR"
  exec 9>"$CLUSTER_DIR/.lock"
  flock -w 120 9 || die "another deploy/kafka.sh holds $CLUSTER_DIR/.lock for over 120 s"
}

# Exit 2 when a port of the current node is taken by something that is not it.
check_node_ports() {
  local p
  for p in "$PORT" "$CONTROLLER_PORT"; do
    if port_open "$p"; then
      err "port $HOST:$p is already in use by another process (not node $NODE of the cluster)."
      err "Stop that process or move the cluster: export ALC_KAFKA_CLUSTER_PORT=<base> ALC_KAFKA_CLUSTER_CONTROLLER_PORT=<base>"
      command -v ss >/dev/null && ss -ltnpH "sport = :$p" 2>/dev/null | sed 's/^/[kafka]   /' >&2 || true
      exit 2
    fi
  done
}

# Write the config, format once, launch; the caller holds the lock and checked ports.
start_node_process() {
  mkdir -p "$KSTATE" "$LOGDIR"
  write_config
  format_storage
  launch_broker
}

cmd_cluster_up() {
  cluster_lock
  ensure_secrets
  local i pid to_start=() t0=$SECONDS
  for ((i = 1; i <= BROKERS; i++)); do
    use_node "$i"
    if pid=$(broker_pid); then
      echo "$pid" >"$PIDFILE"
      render_config | cmp -s - "$CONF" && continue
      log "server.properties changed since node $i (pid $pid) started; restarting it to apply"
      stop_broker "$pid"
    fi
    rm -f "$PIDFILE"
    to_start+=("$i")
  done
  for i in ${to_start[@]+"${to_start[@]}"}; do use_node "$i"; check_node_ports; done
  if ((${#to_start[@]})); then
    NODE=0
    ensure_libs
    # Launch every missing node before waiting for any: a node only answers once a
    # majority of the quorum is up.
    for i in "${to_start[@]}"; do use_node "$i"; start_node_process; done
  fi
  local all_open=1
  for ((i = 1; i <= BROKERS; i++)); do use_node "$i"; port_open "$PORT" || all_open=0; done
  NODE=0
  if ((${#to_start[@]} == 0 && all_open)); then
    log "already running at $CLUSTER_BOOTSTRAP"
    return 0
  fi
  for ((i = 1; i <= BROKERS; i++)); do
    use_node "$i"
    pid=$(broker_pid) || die "node $i is not running"
    wait_ready "$pid"
  done
  NODE=0
  log "cluster of $BROKERS ready at $CLUSTER_BOOTSTRAP in $((SECONDS - t0)) s (state in $CLUSTER_DIR)"
}

cmd_cluster_down() {
  cluster_lock
  # SIGTERM to every node at once: stopped one by one, the last nodes would wait on
  # a controller quorum that is already gone.
  local i pid pids=() t0=$SECONDS
  for ((i = 1; i <= BROKERS; i++)); do
    use_node "$i"
    if pid=$(broker_pid); then
      log "stopping (pid $pid) ..."
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
    rm -f "$PIDFILE"
  done
  NODE=0
  if ((${#pids[@]} == 0)); then
    log "not running"
    return 0
  fi
  for pid in "${pids[@]}"; do
    while pid_alive "$pid" && ((SECONDS - t0 < 30)); do sleep 0.5; done
    if pid_alive "$pid"; then
      log "pid $pid still running after 30 s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      while pid_alive "$pid"; do sleep 0.2; done
    fi
  done
  log "stopped ${#pids[@]} node(s) in $((SECONDS - t0)) s"
}

cmd_cluster_status() {
  local i pid rc=0
  for ((i = 1; i <= BROKERS; i++)); do
    use_node "$i"
    if pid=$(broker_pid) && port_open "$PORT"; then
      log "running (pid $pid), $BOOTSTRAP"
    elif [[ -n ${pid:-} ]]; then
      log "starting or unhealthy (pid $pid), $BOOTSTRAP not answering"; rc=3
    else
      log "stopped (would listen on $BOOTSTRAP)"; rc=3
    fi
    pid=
  done
  NODE=0
  if ((rc == 0)); then log "cluster running, bootstrap $CLUSTER_BOOTSTRAP"; fi
  return "$rc"
}

node_arg() {
  [[ ${1:-} =~ ^[0-9]+$ ]] && (($1 >= 1 && $1 <= BROKERS)) ||
    die "usage: $0 [--brokers N] kill-node|stop-node|start-node I   (I in 1..$BROKERS)"
  use_node "$1"
}

cmd_kill_node() {
  node_arg "${1:-}"
  cluster_lock
  local pid
  if ! pid=$(broker_pid); then
    rm -f "$PIDFILE"
    log "not running"
    return 0
  fi
  kill -KILL "$pid" 2>/dev/null || true
  while pid_alive "$pid"; do sleep 0.1; done
  rm -f "$PIDFILE"
  log "killed (SIGKILL, pid $pid)"
}

cmd_stop_node() {
  node_arg "${1:-}"
  cluster_lock
  local pid
  if ! pid=$(broker_pid); then
    rm -f "$PIDFILE"
    log "not running"
    return 0
  fi
  stop_broker "$pid"
}

cmd_start_node() {
  node_arg "${1:-}"
  cluster_lock
  local pid
  if pid=$(broker_pid); then
    echo "$pid" >"$PIDFILE"
    log "already running (pid $pid) at $BOOTSTRAP"
    return 0
  fi
  rm -f "$PIDFILE"
  check_node_ports
  libs_ok || ensure_libs
  ensure_secrets
  start_node_process
  wait_ready "$LAUNCHED_PID"
}

if ((BROKERS > 1)); then
  case "${1:-}" in
    up) cmd_cluster_up ;;
    down) cmd_cluster_down ;;
    status) cmd_cluster_status ;;
    kill-node) cmd_kill_node "${2:-}" ;;
    stop-node) cmd_stop_node "${2:-}" ;;
    start-node) cmd_start_node "${2:-}" ;;
    libs) ensure_libs ;;
    tool)
      shift
      [[ $# -ge 1 ]] || die "usage: $0 tool CLASS [ARGS...]"
      libs_ok || ensure_libs >&2
      kafka_tool "$@"
      ;;
    *)
      echo "usage: $0 --brokers $BROKERS up|down|status|kill-node I|stop-node I|start-node I|libs|tool CLASS [ARGS...]" >&2
      exit 64
      ;;
  esac
  exit $?
fi

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  libs) ensure_libs ;;
  tool)
    shift
    [[ $# -ge 1 ]] || die "usage: $0 tool CLASS [ARGS...]"
    libs_ok || ensure_libs >&2
    kafka_tool "$@"
    ;;
  *)
    echo "usage: $0 [--brokers 1|3..9] up|down|status|libs|tool CLASS [ARGS...]" >&2
    echo "       $0 [--brokers N] kill-node|stop-node|start-node I" >&2
    exit 64
    ;;
esac
