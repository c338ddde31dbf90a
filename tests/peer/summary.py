"""Per-file summary of ``make peer-tests``: for each peer's JUnit XML
(build/test-results/peer-<name>.xml) and its not-applicable list (peer-<name>-na.tsv,
written by tests/peer/shared.py), one line per peer test file: passed, failed, n/a.

    python -m tests.peer.summary build/test-results/peer-openai-agents.xml ...

Exits 1 when a file has a failure or error, or when a report is missing."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

COLUMNS = ("passed", "failed", "skipped", "n/a")


def _short(path: str) -> str:
    """build/peer/langchain-1.5.0/lc_tests/x/test_y.py -> langchain-1.5.0: x/test_y.py"""
    parts = Path(path).parts
    if "peer" in parts:
        i = parts.index("peer")
        return f"{parts[i + 1]}: {'/'.join(parts[i + 3 :])}"
    return path


def _outcome(case: ET.Element) -> str:
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    if case.find("skipped") is not None:
        return "skipped"
    return "passed"


def tally(xml: Path) -> dict[str, Counter[str]]:
    """file -> counts of passed / failed / skipped / n/a."""
    files: dict[str, Counter[str]] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("file") or case.get("classname", "?").replace(".", "/") + ".py"
        files.setdefault(_short(name), Counter())[_outcome(case)] += 1
    na = xml.with_name(xml.stem + "-na.tsv")
    if na.exists():
        for line in na.read_text("utf-8").splitlines():
            files.setdefault(_short(line.split("\t")[0]), Counter())["n/a"] += 1
    return files


def main(paths: list[str]) -> int:
    rows: list[tuple[str, Counter[str]]] = []
    missing = [p for p in paths if not Path(p).exists()]
    for p in paths:
        if Path(p).exists():
            rows.extend(sorted(tally(Path(p)).items()))
    width = max([len("peer test file")] + [len(f) for f, _ in rows])
    print(f"\n{'peer test file':<{width}}  " + "  ".join(f"{c:>7}" for c in COLUMNS))
    for file, counts in rows:
        print(f"{file:<{width}}  " + "  ".join(f"{counts[c]:>7}" for c in COLUMNS))
    for p in missing:
        print(f"{p}: no report (the run did not finish)")
    bad = missing or any(counts["failed"] for _, counts in rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
