"""make test's two pytest runs end in one JUnit file with every case and its spec ids."""

import xml.etree.ElementTree as ET
from pathlib import Path

from tests.support.junit_merge import merge

_UNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="1">
<testcase classname="tests.unit.test_a" name="test_a"><properties>
<property name="spec" value="R8.2" /></properties></testcase></testsuite></testsuites>"""
_REST = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="2">
<testcase classname="tests.integration.test_b" name="test_b" />
<testcase classname="tests.integration.test_c" name="test_c" /></testsuite></testsuites>"""


def test_the_unit_cases_join_the_whole_file_with_their_spec_ids(tmp_path: Path) -> None:
    part, whole = tmp_path / "junit-unit.xml", tmp_path / "junit.xml"
    part.write_text(_UNIT)
    whole.write_text(_REST)
    merge(part, whole)
    root = ET.parse(whole).getroot()
    names = sorted(c.get("name") or "" for c in root.iter("testcase"))
    assert names == ["test_a", "test_b", "test_c"]
    specs = [p.get("value") for p in root.iter("property") if p.get("name") == "spec"]
    assert specs == ["R8.2"]
    assert not part.exists()


def test_a_run_that_wrote_nothing_leaves_the_other_runs_cases(tmp_path: Path) -> None:
    part, whole = tmp_path / "junit-unit.xml", tmp_path / "junit.xml"
    part.write_text(_UNIT)
    merge(part, whole)
    assert [c.get("name") for c in ET.parse(whole).getroot().iter("testcase")] == ["test_a"]
