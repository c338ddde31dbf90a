"""The last lines CI prints: which step failed, and why, in a few lines.

CI keeps only the tail of a run's output, and the tail is the peer tests' report; a
failure in `make test`, the soak or the scale test scrolled out of it. This reads the
reports the steps wrote (JUnit XML, soak.json, scale.json) and prints one block:
every step's exit code, each failed test with the first lines of its failure, and each
verdict line of the soak and the scale test that is not ok. Standard library only, so
it works even when the project's virtualenv is what broke.

Usage: python3 .ci/summary.py test=RC gate=RC soak=RC scale=RC peer=RC
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

_BUILD = Path(__file__).resolve().parent.parent / "build"
_JUNIT = {
    "test": [_BUILD / "test-results" / "junit.xml"],
    "peer": [
        _BUILD / "test-results" / "peer-openai-agents.xml",
        _BUILD / "test-results" / "peer-langchain.xml",
    ],
}
_REPORT = {"soak": _BUILD / "soak" / "soak.json", "scale": _BUILD / "scale" / "scale.json"}
_LOGS = _BUILD / "ci"
_LOG_TAIL = 25
_LINES_PER_FAILURE = 12
_MAX_FAILURES = 8


def _failed_tests(path: Path) -> list[str]:
    if not path.exists():
        return [f"  no report at {path} (the step died before writing it)"]
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        return [f"  unreadable report {path}: {exc}"]
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    keys = ("tests", "failures", "errors", "skipped")
    totals = {k: sum(int(s.get(k, 0)) for s in suites) for k in keys}
    out = [
        f"  {path.name}: {totals['tests']} tests, {totals['failures']} failed, "
        f"{totals['errors']} errors, {totals['skipped']} skipped"
    ]
    shown = 0
    for case in root.iter("testcase"):
        for bad in [*case.findall("failure"), *case.findall("error")]:
            shown += 1
            if shown > _MAX_FAILURES:
                continue
            out.append(f"  {bad.tag.upper()} {case.get('classname')}::{case.get('name')}")
            text = (bad.get("message") or "") + "\n" + (bad.text or "")
            # The end of a traceback says what failed; its start is pytest's preamble.
            lines = [ln for ln in text.splitlines() if ln.strip()][-_LINES_PER_FAILURE:]
            out.extend(f"      {ln[:200]}" for ln in lines)
    if shown > _MAX_FAILURES:
        out.append(f"  … and {shown - _MAX_FAILURES} more")
    return out


def _verdict(path: Path) -> list[str]:
    if not path.exists():
        return [f"  no report at {path} (the step died before writing it)"]
    try:
        report = json.loads(path.read_text())
    except ValueError as exc:
        return [f"  unreadable report {path}: {exc}"]
    verdict: dict[str, bool] = report.get("verdict", {})
    bad = [name for name, ok in verdict.items() if not ok]
    out = [f"  {path.name}: {len(verdict) - len(bad)}/{len(verdict)} checks ok"]
    out.extend(f"  NOT OK: {name}" for name in bad)
    for key in ("lost", "duplicated", "sequence_gaps", "counter_drift"):
        if report.get(key):
            out.append(f"  {key}: {report[key]}")
    for key in ("errors", "unexpected_exits", "lost_examples"):
        if report.get(key):
            out.append(f"  {key}: {json.dumps(report[key])[:600]}")
    return out


def _log_tail(step: str) -> list[str]:
    log = _LOGS / f"{step}.log"
    if not log.exists():
        return []
    lines = log.read_text(errors="replace").splitlines()[-_LOG_TAIL:]
    head = f"  --- the last {len(lines)} lines of build/ci/{step}.log ---"
    return [head] + [f"  {ln[:200]}" for ln in lines]


def main(argv: list[str]) -> int:
    codes = dict(arg.split("=", 1) for arg in argv)
    print("\n================ CI summary ================")
    for step, rc in codes.items():
        print(f"[ci] {step}: {'ok' if rc == '0' else f'FAILED (exit {rc})'}")
        if rc == "0":
            continue
        for path in _JUNIT.get(step, []):
            print("\n".join(_failed_tests(path)))
        if step in _REPORT:
            print("\n".join(_verdict(_REPORT[step])))
        # A lint, type or set-up failure writes no report; its own last words do.
        print("\n".join(_log_tail(step)))
    print("============================================")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
