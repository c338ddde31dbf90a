#!/usr/bin/env bash
# The generated-client check (make client-check, part of make test): generate a Python
# client from docs/openapi.json with openapi-python-client, then type-check
# tests/client_check/program.py against it (mypy strict). A published answer whose field
# type changes breaks the program's types. The generator reads the local file only; its
# environment is installed once (pip) into build/client-check/venv.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$repo/tests/client_check"
out="$repo/build/client-check"
tools="$out/venv"
py="${PY:-$repo/.venv/bin/python}"
want="$(sha256sum "$here/requirements.txt" | cut -c1-16)"
if [[ ! -x "$tools/bin/openapi-python-client" || "$(cat "$tools/.stamp" 2>/dev/null)" != "$want" ]]; then
  echo "[client-check] installing the generator into $tools (pip)"
  python3 -m venv "$tools"
  "$tools/bin/python" -m pip install -q -r "$here/requirements.txt"
  echo "$want" > "$tools/.stamp"
fi
rm -rf "$out/agentloom_client"
"$tools/bin/openapi-python-client" generate --path "$repo/docs/openapi.json" \
  --config "$here/generator.yaml" --output-path "$out/agentloom_client" --meta none >/dev/null
cd "$repo"
MYPYPATH="$out" "$py" -m mypy --config-file "$here/mypy.ini" --cache-dir "$out/mypy-cache" \
  "$here/program.py"
echo "[client-check] the client generated from docs/openapi.json types tests/client_check/program.py"
