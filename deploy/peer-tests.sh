#!/usr/bin/env bash
# The peers' own tests against ours (issue 15): downloads the pinned openai-agents sdist
# from PyPI, renames its `tests` package to `agents_tests` (ours is `tests`), and runs its
# session-memory tests with SQLiteSession replaced by AgentLoomSession on the real stack
# (tests/peer/agents_shim.py becomes the conftest). Idempotent; JUnit XML in build/.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="$repo/.venv/bin/python"
version="$("$py" -c 'import importlib.metadata as m; print(m.version("openai-agents"))')"
root="$repo/build/peer/openai-agents-$version"
if [[ ! -d "$root/agents_tests" ]]; then
  tmp="$(mktemp -d)"
  "$py" -m pip download -q --no-binary :all: --no-deps "openai-agents==$version" -d "$tmp"
  tar xzf "$tmp/openai_agents-$version.tar.gz" -C "$tmp"
  mkdir -p "$root"
  cp -r "$tmp/openai_agents-$version/tests" "$root/agents_tests"
  grep -rl --include='*.py' -E '(from|import) tests(\.| )' "$root/agents_tests" \
    | xargs sed -i -E 's/(from|import) tests(\.| )/\1 agents_tests\2/g'
  rm -rf "$tmp"
fi
cp "$repo/tests/peer/agents_shim.py" "$root/conftest.py"
mkdir -p "$repo/build/test-results"
cd "$repo"
exec "$py" -m pytest -p no:cacheprovider -q -rA \
  --junitxml=build/test-results/peer-openai-agents.xml \
  "$root/agents_tests/memory/test_session.py" "$@"
