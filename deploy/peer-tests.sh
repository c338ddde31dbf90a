#!/usr/bin/env bash
# The peers' own tests against ours (issue 15), on the real stack (tests/conftest.py: the
# one named by ALC_TEST_KAFKA_BOOTSTRAP / ALC_TEST_PG_DSN, else one it starts):
#   - openai-agents: its session-memory tests with SQLiteSession replaced by
#     AgentLoomSession (tests/peer/agents_shim.py becomes the conftest);
#   - langchain: its SummarizationMiddleware tests with SummarizationMiddleware replaced by
#     AgentLoomMiddleware (tests/peer/langchain_shim.py).
# Each sdist is the version installed in .venv, downloaded once from PyPI (pip download
# --no-binary :all: --no-deps) into build/peer/<name>-<version>, its `tests` package
# renamed (ours is `tests`); nothing is fetched at test time. Idempotent. JUnit XML in
# build/test-results/peer-<name>.xml, then a per-file summary (passed, failed, n/a).
# Extra arguments go to both pytest runs.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="$repo/.venv/bin/python"

# fetch DIST PACKAGE_DIR FILE... : the sdist's tests/FILE... ("." for all of it; with the
# __init__.py files on their way) copied to build/peer/DIST-VERSION/PACKAGE_DIR, where
# `tests` is renamed PACKAGE_DIR in imports; prints build/peer/DIST-VERSION.
fetch() {
  local dist="$1" pkg="$2"
  shift 2
  local version root tmp src f d
  version="$("$py" -c "import importlib.metadata as m; print(m.version('$dist'))")"
  root="$repo/build/peer/$dist-$version"
  if [[ ! -d "$root/$pkg" ]]; then
    tmp="$(mktemp -d)"
    "$py" -m pip download -q --no-binary :all: --no-deps "$dist==$version" -d "$tmp" >&2
    tar xzf "$tmp"/*.tar.gz -C "$tmp"
    src="$(find "$tmp" -mindepth 2 -maxdepth 2 -type d -name tests | head -n 1)"
    mkdir -p "$tmp/out"
    for f in "$@"; do
      mkdir -p "$tmp/out/$(dirname "$f")"
      cp -r "$src/$f" "$tmp/out/$f"
      d="$(dirname "$f")"
      while :; do
        [[ -f "$src/$d/__init__.py" ]] && cp "$src/$d/__init__.py" "$tmp/out/$d/"
        [[ "$d" == "." ]] && break
        d="$(dirname "$d")"
      done
    done
    grep -rl --include='*.py' -E '(from|import) tests(\.| )' "$tmp/out" \
      | xargs -r sed -i -E "s/(from|import) tests(\.| )/\1 $pkg\2/g"
    mkdir -p "$root"
    rm -rf "${root:?}/$pkg"
    mv "$tmp/out" "$root/$pkg"
    rm -rf "$tmp"
  fi
  echo "$root"
}

agents="$(fetch openai-agents agents_tests .)"  # test_session.py imports its siblings
langchain="$(fetch langchain lc_tests \
  unit_tests/agents/model.py \
  unit_tests/agents/middleware/implementations/test_summarization.py)"
cp "$repo/tests/peer/agents_shim.py" "$agents/conftest.py"
cp "$repo/tests/peer/langchain_shim.py" "$langchain/conftest.py"

mkdir -p "$repo/build/test-results"
cd "$repo"
# A run that dies before its report must not be summarised from the previous one.
rm -f build/test-results/peer-openai-agents* build/test-results/peer-langchain*
rc=0
"$py" -m pytest -p no:cacheprovider -q -rA \
  --junitxml=build/test-results/peer-openai-agents.xml \
  "$agents/agents_tests/memory/test_session.py" "$@" || rc=$?
"$py" -m pytest -p no:cacheprovider -q -rA \
  --junitxml=build/test-results/peer-langchain.xml \
  "$langchain/lc_tests/unit_tests/agents/middleware/implementations/test_summarization.py" \
  "$@" || rc=$?
"$py" -m tests.peer.summary build/test-results/peer-openai-agents.xml \
  build/test-results/peer-langchain.xml || rc=$?
exit "$rc"
