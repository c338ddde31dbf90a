"""R12.5: long-term memory is a port only; nothing writes memory automatically."""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from domain.memory import MemoryItem, as_material

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("schemas", "domain", "storage", "streams", "services")
WRITE_NAMES = {"MemoryWriter", "write_memory", "memory_write"}


def _memory_writes(tree: ast.AST) -> list[str]:
    """Every use of the writer port, and every call of a ``.write`` on something named
    like memory: the only ways product code could write long-term memory."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in WRITE_NAMES:
            found.append(node.id)
        elif isinstance(node, ast.ImportFrom) and any(a.name in WRITE_NAMES for a in node.names):
            found.append(f"import from {node.module}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "write"
            and "memory" in ast.unparse(node.func.value).lower()
        ):
            found.append(ast.unparse(node))
    return found


@pytest.mark.spec("R12.5")
def test_no_code_path_writes_memory_on_its_own() -> None:
    writers = {}
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "domain" / "memory.py":  # the port's own definition
                continue
            found = _memory_writes(ast.parse(path.read_text("utf-8")))
            if found:
                writers[str(path.relative_to(ROOT))] = found
    assert writers == {}


@pytest.mark.spec("R12.5")
def test_the_writer_check_sees_a_write() -> None:
    code = "async def f(memory_service, item):\n    await memory_service.write(item)\n"
    assert _memory_writes(ast.parse(code)) == ["memory_service.write(item)"]
    assert _memory_writes(ast.parse("from domain.memory import MemoryWriter\n"))


@pytest.mark.spec("R12.4", "R12.5")
def test_memory_enters_as_cited_material_newest_unexpired() -> None:
    now = datetime(2026, 11, 30, tzinfo=UTC)
    items = [
        MemoryItem("m1", "1", "u/1", "likes tea", "explicit"),
        MemoryItem("m1", "2", "u/1", "likes coffee", "explicit"),
        MemoryItem("m2", "1", "u/1", "old", "explicit", expires_at=now - timedelta(days=1)),
    ]
    materials = as_material(items, now)
    assert [(m.citation_id, m.version, m.text) for m in materials] == [
        ("memory:m1", "2", "likes coffee")
    ]
    assert all(m.origin == "memory" for m in materials)
