#!/usr/bin/env bash
# deploy/postgres.sh — a private PostgreSQL server (Debian packages, no Docker):
# own data directory, own port, listening on 127.0.0.1 only, trust auth.
#
#   deploy/postgres.sh up       install postgresql if missing, initdb once, start, create role + database
#   deploy/postgres.sh down     pg_ctl stop -m fast
#   deploy/postgres.sh status   exit 0 when running, 3 when not
#
# PostgreSQL refuses to run as root, so when this script runs as root it runs
# initdb/pg_ctl as the 'postgres' OS user (runuser). If that user cannot reach
# <state dir>/postgres (e.g. the repo lives under /root), the cluster goes to
# /var/tmp/agentloom-pg-<hash of the state dir path> instead.
#
# Env: ALC_STATE_DIR (default <repo>/.state), ALC_PG_PORT (55432),
#      ALC_PG_DB (agentloom), ALC_PG_USER (agentloom),
#      ALC_STACK_CPU (batch: the server under SCHED_BATCH; deploy/cpu-policy.sh).
# Exit codes: 0 ok, 1 failure, 2 port taken by something else, 3 not running (status).
set -euo pipefail

DEPLOY_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=deploy/cpu-policy.sh
source "$DEPLOY_DIR/cpu-policy.sh"
REPO=$(cd "$DEPLOY_DIR/.." && pwd)
STATE_DIR=$(realpath -m "${ALC_STATE_DIR:-$REPO/.state}")
PSTATE=$STATE_DIR/postgres

PORT=${ALC_PG_PORT:-55432}
DB=${ALC_PG_DB:-agentloom}
DB_USER=${ALC_PG_USER:-agentloom}
HOST=127.0.0.1
DSN=postgresql://$DB_USER@$HOST:$PORT/$DB

log() { echo "[postgres] $*"; }
err() { echo "[postgres] ERROR: $*" >&2; }
die() { err "$*"; exit 1; }

IS_ROOT=0
[[ $EUID -eq 0 ]] && IS_ROOT=1

# Run a command as the OS user that owns the cluster (postgres when we are root).
# fd 9 is our lock file: never let it leak into the postmaster.
as_pg() {
  if ((IS_ROOT)); then
    (cd / && runuser -u postgres -- "$@") 9>&-
  else
    "$@" 9>&-
  fi
}

port_open() {
  timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null
}

# --- where the cluster lives --------------------------------------------------
# BASE holds data/, run/ (unix socket) and postgres.log; it must be reachable
# and writable by the postgres user.
resolve_base() {
  FALLBACK=/var/tmp/agentloom-pg-$(printf '%s' "$STATE_DIR" | sha256sum | cut -c1-10)
  BASE=$PSTATE
  if ((IS_ROOT)); then
    if [[ -d $FALLBACK/data ]] && [[ ! -d $PSTATE/data ]]; then
      BASE=$FALLBACK            # chosen on an earlier run
    elif [[ -d $PSTATE ]] && ! runuser -u postgres -- test -x "$PSTATE" 2>/dev/null; then
      BASE=$FALLBACK
    elif [[ ! -d $PSTATE ]] && ! runuser -u postgres -- test -x "$(nearest_existing "$PSTATE")" 2>/dev/null; then
      BASE=$FALLBACK
    fi
  fi
  DATA=$BASE/data
  PGLOG=$BASE/postgres.log
  SOCKDIR=$BASE/run
  # unix socket paths are limited to ~107 bytes
  if ((${#SOCKDIR} + 20 > 100)); then SOCKDIR=/tmp; fi
}

nearest_existing() {
  local p=$1
  while [[ ! -e $p ]]; do p=$(dirname "$p"); done
  echo "$p"
}

prepare_base() {
  mkdir -p "$PSTATE"
  if [[ $BASE != "$PSTATE" ]]; then
    log "the postgres user cannot reach $PSTATE; using $BASE for the cluster"
    mkdir -p "$BASE"
    chmod 700 "$BASE"
    # convenience links from the state dir
    ln -sfn "$BASE/data" "$PSTATE/data"
    ln -sfn "$BASE/postgres.log" "$PSTATE/postgres.log"
  fi
  mkdir -p "$SOCKDIR"
  [[ -e $PGLOG ]] || touch "$PGLOG"
  if ((IS_ROOT)); then
    chown postgres:postgres "$BASE" "$PGLOG"
    if [[ $SOCKDIR != /tmp ]]; then chown postgres:postgres "$SOCKDIR"; fi
  fi
}

# --- binaries -----------------------------------------------------------------

find_bindir() {
  local want=""
  [[ -f ${DATA:-/nonexistent}/PG_VERSION ]] && want=$(<"$DATA/PG_VERSION")
  if [[ -n $want ]]; then
    [[ -x /usr/lib/postgresql/$want/bin/postgres ]] ||
      die "cluster in $DATA is PostgreSQL $want but /usr/lib/postgresql/$want/bin is missing (install postgresql-$want or remove $DATA)"
    PGBIN=/usr/lib/postgresql/$want/bin
    return 0
  fi
  local initdb
  initdb=$(compgen -G '/usr/lib/postgresql/*/bin/initdb' | sort -V | tail -n 1 || true)
  [[ -n $initdb ]] || return 1
  PGBIN=$(dirname "$initdb")
}

ensure_installed() {
  find_bindir && return 0
  ((IS_ROOT)) || die "PostgreSQL server binaries not found; run as root or: sudo apt-get install -y postgresql"
  log "PostgreSQL not installed; apt-get install -y postgresql ..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
  find_bindir || die "apt-get installed postgresql but no /usr/lib/postgresql/*/bin/initdb"
  log "installed $("$PGBIN/postgres" --version)"
}

# --- state queries --------------------------------------------------------------

# Alive and not a zombie. (pg_ctl status uses kill -0, which also succeeds on
# a zombie; a container's PID 1 may be slow to reap an orphaned postmaster.)
pid_alive() {
  local st
  { read -r st <"/proc/$1/stat"; } 2>/dev/null || return 1
  st=${st##*) }
  [[ ${st%% *} != Z ]]
}

postmaster_pid() { sed -n 1p "$DATA/postmaster.pid" 2>/dev/null; }

server_running() { # our cluster's postmaster is alive
  [[ -f $DATA/PG_VERSION && -f $DATA/postmaster.pid ]] || return 1
  local pid
  pid=$(postmaster_pid)
  [[ $pid =~ ^[0-9]+$ ]] && pid_alive "$pid" &&
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == postgres* ]]
}

# postmaster.pid left behind by a crash: PostgreSQL itself ignores it when the
# pid is gone, but refuses to start while that pid is a zombie or was reused by
# another process, so drop it in those two cases.
clear_stale_pidfile() {
  local pid
  [[ -f $DATA/postmaster.pid ]] || return 0
  pid=$(postmaster_pid)
  if ! [[ $pid =~ ^[0-9]+$ && -e /proc/$pid ]]; then
    log "previous server did not shut down cleanly; PostgreSQL will run crash recovery"
    return 0
  fi
  log "removing stale postmaster.pid (pid $pid is not a live postmaster)"
  rm -f "$DATA/postmaster.pid"
}

running_port() { sed -n 4p "$DATA/postmaster.pid" 2>/dev/null; }

psql_admin() {
  "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$HOST" -p "$PORT" -U postgres -d postgres "$@"
}

# --- steps ----------------------------------------------------------------------

init_cluster() {
  if [[ -f $DATA/PG_VERSION ]]; then
    return 0
  fi
  if [[ -d $DATA ]] && [[ -n $(ls -A "$DATA" 2>/dev/null) ]]; then
    die "$DATA exists and is not empty but holds no cluster; remove it and retry"
  fi
  local locale_opt=(--no-locale)
  locale -a 2>/dev/null | grep -qiE '^c\.utf-?8$' && locale_opt=(--locale=C.UTF-8)
  log "initdb $DATA ($("$PGBIN/postgres" --version | awk '{print $NF}'), UTF8, trust auth)"
  as_pg "$PGBIN/initdb" -D "$DATA" -U postgres -A trust -E UTF8 "${locale_opt[@]}" >"$BASE/initdb.log" 2>&1 || {
    tail -n 20 "$BASE/initdb.log" >&2
    die "initdb failed (full output in $BASE/initdb.log)"
  }
}

configure_cluster() {
  # Settings live in agentloom.conf (rewritten on every 'up', so env changes
  # such as ALC_PG_PORT take effect on the next start), included once.
  local conf=$DATA/agentloom.conf tmp
  tmp=$(mktemp)
  cat >"$tmp" <<EOF
# Written by deploy/postgres.sh on every 'up' — edit the script, not this file.
listen_addresses = '$HOST'
port = $PORT
unix_socket_directories = '$SOCKDIR'
# dev/CI database: skip fsync (a crash of the machine may corrupt it), keep
# synchronous_commit so commits behave like production.
fsync = off
synchronous_commit = on
shared_buffers = 256MB
max_connections = 200
# The working set is in memory: a page read at random costs about what one read in
# order does. At the default (4) the planner hashes small tables' joins over whole-table
# scans that a key lookup answers (a batch's few runs among thousands).
random_page_cost = 1.1
EOF
  if ! cmp -s "$tmp" "$conf" 2>/dev/null; then
    cp "$tmp" "$conf"
    if ((IS_ROOT)); then chown postgres:postgres "$conf"; fi
  fi
  rm -f "$tmp"
  if ! grep -q "^include_if_exists = 'agentloom.conf'" "$DATA/postgresql.conf"; then
    as_pg sh -c "printf '\n%s\n' \"include_if_exists = 'agentloom.conf'\" >>'$DATA/postgresql.conf'"
  fi
  # initdb -A trust already trusts 127.0.0.1/32; make sure it stays that way.
  if ! grep -qE '^host[[:space:]]+all[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust' "$DATA/pg_hba.conf"; then
    as_pg sh -c "printf '%s\n' 'host all all 127.0.0.1/32 trust' >>'$DATA/pg_hba.conf'"
  fi
}

start_server() {
  log "starting PostgreSQL on $HOST:$PORT (data $DATA, log $PGLOG)"
  # shellcheck disable=SC2046  # the policy's words, or none
  if ! as_pg $(cpu_policy_prefix) "$PGBIN/pg_ctl" -D "$DATA" -l "$PGLOG" -w -t 60 start >/dev/null; then
    echo "---- last lines of $PGLOG ----" >&2
    tail -n 25 "$PGLOG" >&2
    die "pg_ctl start failed"
  fi
}

ensure_role_and_db() {
  local have
  have=$(psql_admin -tA -v u="$DB_USER" -v d="$DB" <<'SQL'
SELECT (SELECT count(*) FROM pg_roles WHERE rolname = :'u') || ':' ||
       (SELECT count(*) FROM pg_database WHERE datname = :'d');
SQL
  ) || die "cannot query the server as postgres over TCP"
  [[ $have == 1:1 ]] && return 0
  [[ ${have%%:*} == 1 ]] || log "creating role $DB_USER (LOGIN SUPERUSER)"
  [[ ${have##*:} == 1 ]] || log "creating database $DB owned by $DB_USER"
  psql_admin -v u="$DB_USER" -v d="$DB" <<'SQL' >/dev/null
SELECT format('CREATE ROLE %I LOGIN SUPERUSER', :'u')
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'u') \gexec
SELECT format('CREATE DATABASE %I OWNER %I ENCODING ''UTF8''', :'d', :'u')
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'d') \gexec
SQL
}

check_ready() {
  local t0=$SECONDS
  until "$PGBIN/pg_isready" -q -h "$HOST" -p "$PORT" -U postgres -d postgres; do
    ((SECONDS - t0 < 30)) || die "pg_isready still failing on $HOST:$PORT after 30 s (log: $PGLOG)"
    sleep 0.5
  done
  ensure_role_and_db
  local one
  one=$("$PGBIN/psql" -X -tA -v ON_ERROR_STOP=1 "$DSN" -c 'select 1' 2>&1) || die "psql '$DSN' failed: $one"
  [[ $one == 1 ]] || die "unexpected answer from 'select 1': $one"
}

# --- commands ---------------------------------------------------------------------

cmd_up() {
  local t0=$SECONDS
  mkdir -p "$PSTATE"
  exec 9>"$PSTATE/.lock"
  flock -w 120 9 || die "another deploy/postgres.sh holds $PSTATE/.lock for over 120 s"

  resolve_base
  ensure_installed

  if server_running; then
    local rp
    rp=$(running_port)
    if [[ $rp != "$PORT" ]]; then
      err "our cluster ($DATA) is already running on port $rp, but ALC_PG_PORT=$PORT; run 'deploy/postgres.sh down' first"
      exit 1
    fi
    check_ready
    log "already running (pid $(postmaster_pid)) at $DSN"
    return 0
  fi

  if port_open "$PORT"; then
    err "port $HOST:$PORT is already in use by another process (not our cluster in $DATA)."
    err "Stop that process or pick another port: export ALC_PG_PORT=<free port>"
    command -v ss >/dev/null && ss -ltnpH "sport = :$PORT" 2>/dev/null | sed 's/^/[postgres]   /' >&2 || true
    exit 2
  fi

  prepare_base
  init_cluster
  configure_cluster
  clear_stale_pidfile
  start_server
  check_ready
  log "ready at $DSN ($((SECONDS - t0)) s)"
}

cmd_down() {
  mkdir -p "$PSTATE"
  exec 9>"$PSTATE/.lock"
  flock -w 120 9 || die "another deploy/postgres.sh holds $PSTATE/.lock for over 120 s"
  resolve_base
  if ! server_running; then
    log "not running"
    return 0
  fi
  find_bindir || die "PostgreSQL binaries not found"
  log "stopping (pg_ctl stop -m fast) ..."
  as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >/dev/null
  log "stopped"
}

cmd_status() {
  resolve_base
  if server_running && find_bindir; then
    local rp
    rp=$(running_port)
    if "$PGBIN/pg_isready" -q -h "$HOST" -p "$rp" -U postgres -d postgres; then
      log "running (pid $(postmaster_pid)), $DSN"
      [[ $rp == "$PORT" ]] || log "note: it listens on port $rp, not ALC_PG_PORT=$PORT"
      return 0
    fi
    log "starting or unhealthy: postmaster alive but $HOST:$rp not accepting connections"
    return 3
  fi
  if [[ -f $DATA/PG_VERSION ]]; then
    log "stopped (data in $DATA; would serve $DSN)"
  else
    log "stopped (not initialised; would serve $DSN)"
  fi
  return 3
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
