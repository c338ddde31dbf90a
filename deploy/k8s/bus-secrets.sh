#!/usr/bin/env bash
# deploy/k8s/bus-secrets.sh — the operator's one-time provisioning of the bus secrets
# (docs/security.md, deploy/k8s/README.md), before the first `kubectl apply -k`:
#
#   agentloom-bus-prepare     signing-key                Prepare's own signing key
#   agentloom-bus-compaction  signing-key                the compaction service's own
#   agentloom-bus-verify      verify-keys, key-issuer    the processor's: every key it
#                                                        accepts per service, and the key
#                                                        issuer secret (agentloom-keys)
#
# Each key is drawn on its own (none derived from another). The values go through files
# in a private temporary directory (mode 700, removed on exit), never a command line.
# A Secret that exists is left as it is (a rotation edits it: docs/security.md).
# Env: ALC_K8S_NAMESPACE (agentloom), KUBECTL (kubectl).
set -euo pipefail

NS=${ALC_K8S_NAMESPACE:-agentloom}
KUBECTL=${KUBECTL:-kubectl}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
chmod 700 "$DIR"
umask 077

key() { od -vAn -N32 -tx1 /dev/urandom | tr -d ' \n' >"$DIR/$1"; }

exists() { "$KUBECTL" -n "$NS" get secret "$1" >/dev/null 2>&1; }

key prepare
key compaction
key key-issuer
printf 'prepare=%s\ncompaction=%s\n' "$(<"$DIR/prepare")" "$(<"$DIR/compaction")" >"$DIR/verify-keys"

if exists agentloom-bus-verify || exists agentloom-bus-prepare || exists agentloom-bus-compaction; then
  echo "[bus-secrets] the bus Secrets exist in namespace $NS; nothing changed" >&2
  echo "[bus-secrets] (to rotate a key, follow docs/security.md 'Rotating a bus secret')" >&2
  exit 0
fi
"$KUBECTL" -n "$NS" create secret generic agentloom-bus-verify \
  --from-file=verify-keys="$DIR/verify-keys" --from-file=key-issuer="$DIR/key-issuer"
"$KUBECTL" -n "$NS" create secret generic agentloom-bus-prepare \
  --from-file=signing-key="$DIR/prepare"
"$KUBECTL" -n "$NS" create secret generic agentloom-bus-compaction \
  --from-file=signing-key="$DIR/compaction"
echo "[bus-secrets] created agentloom-bus-verify, agentloom-bus-prepare, agentloom-bus-compaction in $NS"
