#!/usr/bin/env bash
# Creates/updates the project's Python environment in .venv. Idempotent: when the
# installed set already matches pyproject.toml (hash stamp), it returns in well under
# a second. Every install step lives here so a fresh clone needs nothing by hand.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${ALC_VENV:-$repo/.venv}"
stamp="$venv/.agentloom-stamp"
want="$(sha256sum "$repo/pyproject.toml" | cut -c1-16)"
# Debian's chromium + chromium-driver for the browser tests (issue 14); fast when present.
# Outside CI a missing browser only warns here (tests/browser then fails, never skips).
bash "$repo/deploy/chromium.sh" || [[ ${CI:-} != true ]]

if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi
echo "[bootstrap] creating Python environment in $venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
echo "[bootstrap] installing agentloom-context with dev + integration extras (pip)"
"$venv/bin/python" -m pip install -q -e "$repo[dev,openai-agents,langchain]"
echo "$want" > "$stamp"
echo "[bootstrap] done"
