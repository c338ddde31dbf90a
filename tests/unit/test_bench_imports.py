"""The benchmarks run on the product (``devstack/`` and below), never on the tests: no
module under ``benchmarks/`` imports ``tests`` — at module level or inside a function —
so a benchmark keeps working when the tests' harnesses change (issue 40 item 6)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tests_imports(root: Path) -> list[str]:
    """``path:line`` of every import of the ``tests`` package under ``root/benchmarks``."""
    found: list[str] = []
    for path in sorted((root / "benchmarks").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            if any(name == "tests" or name.startswith("tests.") for name in names):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_benchmark_imports_the_tests() -> None:
    assert _tests_imports(ROOT) == []


def test_the_check_sees_both_forms_at_any_depth(tmp_path: Path) -> None:
    bench = tmp_path / "benchmarks" / "sub"
    bench.mkdir(parents=True)
    (bench / "a.py").write_text(
        "import json\n"
        "from devstack.events import user\n"
        "def f() -> None:\n"
        "    from tests.support.events import user\n"
    )
    (tmp_path / "benchmarks" / "b.py").write_text("import tests.support.stack as s\n")
    assert _tests_imports(tmp_path) == ["benchmarks/b.py:1", "benchmarks/sub/a.py:4"]
