#!/usr/bin/env bash
# deploy/k8s/db-logins.sh — the password of each service's database login
# (storage/roles.py), once, before the first `kubectl apply -k`: a basic-auth Secret
# agentloom-pg-<role> per role, which CloudNativePG sets as the managed role's password
# (postgres.yaml `managed.roles`) and the role's Deployment reads (ALC_PG_PASSWORD).
# The passwords go through files in a private temporary directory (removed on exit),
# never a command line. A Secret that exists is left as it is.
# Env: ALC_K8S_NAMESPACE (agentloom), KUBECTL (kubectl).
set -euo pipefail

NS=${ALC_K8S_NAMESPACE:-agentloom}
KUBECTL=${KUBECTL:-kubectl}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
chmod 700 "$DIR"
umask 077

for role in processor prepare compaction analytics cli; do
  name=agentloom-pg-$role
  if "$KUBECTL" -n "$NS" get secret "$name" >/dev/null 2>&1; then
    echo "[db-logins] $name exists; left as it is" >&2
    continue
  fi
  printf 'alc_%s' "$role" >"$DIR/username"
  od -vAn -N24 -tx1 /dev/urandom | tr -d ' \n' >"$DIR/password"
  "$KUBECTL" -n "$NS" create secret generic "$name" --type=kubernetes.io/basic-auth \
    --from-file=username="$DIR/username" --from-file=password="$DIR/password"
  "$KUBECTL" -n "$NS" label secret "$name" cnpg.io/reload=true >/dev/null
done
