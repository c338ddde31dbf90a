"""``python -m tests.support.junit_merge PART WHOLE``: the test suites of the JUnit file
PART appended to WHOLE's, and PART removed, so that ``make test`` leaves one JUnit file
(``build/test-results/junit.xml``) with every test case and its ``spec`` properties
although the unit tests run in their own pytest beside the linters. A missing file
counts as no suites (its pytest did not get to write it)."""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def _suites(path: Path) -> list[ET.Element]:
    if not path.exists():
        return []
    root = ET.parse(path).getroot()
    return [root] if root.tag == "testsuite" else list(root)


def merge(part: Path, whole: Path) -> None:
    root = ET.Element("testsuites")
    root.extend([*_suites(whole), *_suites(part)])
    whole.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(whole, encoding="utf-8", xml_declaration=True)
    part.unlink(missing_ok=True)


if __name__ == "__main__":
    merge(Path(sys.argv[1]), Path(sys.argv[2]))
