"""The pure core must not reach for I/O frameworks: checked on the source with ``ast``
(importing would hide a lazy import inside a function, and would run module code)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"asyncio", "faust", "aiokafka", "asyncpg", "fastapi", "httpx"}
PROJECT_PACKAGES = {"schemas", "streams", "services", "storage", "benchmarks"}

PURE_MODULES = sorted(
    [str(p.relative_to(ROOT)) for p in (ROOT / "services" / "core").glob("*.py")]
    + [
        "streams/planning.py",
        "streams/accounting.py",
        "schemas/validation.py",
        "schemas/contracts.py",
        "services/compaction/contracts.py",
        "services/compaction/validate.py",
        "services/compaction/extractive.py",
        "services/compaction/scripted.py",
        "services/compaction/bound.py",
        "services/compaction/fill.py",
        "services/compaction/salience.py",
        "schemas/limits.py",
        "services/integrations/responses_items.py",
        "schemas/rollup.py",
        "services/integrations/langchain_messages.py",
        "schemas/auth.py",
    ]
)


def _module_path(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path) -> set[str]:
    """Every module named by an import statement anywhere in ``path`` (absolute names)."""
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                prefix = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{prefix}.{node.module}" if node.module else prefix
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Name, ast.Attribute))
            and getattr(node.func, "id", getattr(node.func, "attr", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.add(str(node.args[0].value))
    return found


def _closure(start: str) -> dict[str, set[str]]:
    """Imports of ``start`` and of every project module it imports, transitively."""
    seen: dict[str, set[str]] = {}
    todo = [ROOT / start]
    while todo:
        path = todo.pop()
        key = str(path.relative_to(ROOT))
        if key in seen:
            continue
        names = _imports(path)
        seen[key] = names
        for name in names:
            if name.split(".")[0] not in PROJECT_PACKAGES:
                continue
            parts = name.split(".")
            # importing a.b.c runs a/__init__.py and a/b/__init__.py too
            for i in range(1, len(parts) + 1):
                target = _module_path(".".join(parts[:i]))
                if target is not None:
                    todo.append(target)
    return seen


def test_pure_module_list_is_not_empty() -> None:
    assert "services/core/assembly.py" in PURE_MODULES
    assert "services/core/budget.py" in PURE_MODULES
    assert "services/core/tokens.py" in PURE_MODULES
    assert all((ROOT / m).is_file() for m in PURE_MODULES)


def test_import_scanner_sees_io_modules() -> None:
    # The scanner must be able to fail: the processor really imports asyncpg.
    names = _imports(ROOT / "streams" / "processor.py")
    assert "asyncpg" in names
    assert "streams.planning" in names


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_module_imports_no_io_framework(module: str) -> None:
    offenders = {
        f"{where} imports {name}"
        for where, names in _closure(module).items()
        for name in names
        if name.split(".")[0] in FORBIDDEN
    }
    assert offenders == set()


# Layers, one direction (issue 11): schemas at the bottom, storage above it, streams and
# services on top. These storage modules still reach up for pure code that has not moved
# down yet; issue 11 moves it. Nothing may be added to this list.
KNOWN_BACK_IMPORTS = {
    "storage/compaction.py": {"services"},
    "storage/ingest.py": {"streams"},
    "storage/migrate.py": {"services"},
    "storage/threads.py": {"services"},
}
HIGHER = {"schemas": {"storage", "streams", "services"}, "storage": {"streams", "services"}}


@pytest.mark.parametrize("package", sorted(HIGHER))
def test_no_new_import_runs_back_up(package: str) -> None:
    offenders = {}
    for path in sorted((ROOT / package).glob("*.py")):
        key = str(path.relative_to(ROOT))
        up = {name.split(".")[0] for name in _imports(path)} & HIGHER[package]
        if up - KNOWN_BACK_IMPORTS.get(key, set()):
            offenders[key] = sorted(up)
    assert offenders == {}
