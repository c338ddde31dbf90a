"""docs/architecture.md names only what exists, so the map fails as soon as the code it
draws moves:

- every ``path/like/this.py`` it mentions is a file of the repository;
- in the packages table, every file a row lists (``store.py``) is in that row's folder,
  and every module of every product folder is listed in its folder's row;
- every backticked code name (``BatchProcessor.handle``, ``plan_batch``) is defined —
  each dotted part a class, a function, a method or an assignment — in one of the
  modules its section names (a path names a module once, later steps refer back to it).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"

# A module path: at least one folder, then a Python file name.
PATH = re.compile(r"(?<![\w./-])((?:[A-Za-z_][\w-]*/)+[A-Za-z_]\w*\.py)\b")
# A backticked code name: an identifier, maybe dotted (a file name is not one).
NAME = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)`")
FILE_SUFFIXES = ("py", "json", "md", "avsc", "sql")
# A packages-table row: its folder, then what the row says.
ROW = re.compile(r"^\| `([\w/]+/)` \|(.*)$", re.MULTILINE)
ROW_FILE = re.compile(r"`(\w+\.(?:py|json))`")
PRODUCT = ("schemas", "domain", "storage", "streams", "services", "devstack")
# Names of the frameworks the paths pass through, not of our code.
EXTERNAL = {"take_events", "pg_notify", "ORJSONResponse", "response_model"}


def module_paths(text: str) -> list[str]:
    return sorted(set(PATH.findall(text)))


def missing_paths(text: str) -> list[str]:
    return [p for p in module_paths(text) if not (ROOT / p).is_file()]


def missing_table_files(text: str) -> list[str]:
    return [
        folder + name
        for folder, row in ROW.findall(text)
        for name in ROW_FILE.findall(row)
        if not (ROOT / folder / name).is_file()
    ]


def unlisted_modules(text: str, root: Path = ROOT) -> list[str]:
    """The product modules (``__init__.py`` aside) that no table row lists under their
    folder, a folder without a row included."""
    rows: dict[str, set[str]] = {}
    for folder, row in ROW.findall(text):
        rows.setdefault(folder, set()).update(ROW_FILE.findall(row))
    return sorted(
        str(p.relative_to(root))
        for package in PRODUCT
        for p in (root / package).rglob("*.py")
        if p.name != "__init__.py"
        and p.name not in rows.get(str(p.parent.relative_to(root)) + "/", set())
    )


def defined(path: Path) -> set[str]:
    """Every class and function of ``path`` (at any depth: methods and nested functions
    too), and the names assigned at module or class level (constants, fields)."""
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    out: set[str] = set()
    bodies = [tree.body]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        if isinstance(node, ast.ClassDef):
            bodies.append(node.body)
    for body in bodies:
        for stmt in body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else []
            if isinstance(stmt, ast.AnnAssign):
                targets = [stmt.target]
            out.update(t.id for t in targets if isinstance(t, ast.Name))
    return out


def sections(text: str) -> list[str]:
    return re.split(r"\n(?=## )", text)


def undefined_names(text: str) -> list[str]:
    """The code names of each section that none of the section's modules defines."""
    out: list[str] = []
    for section in sections(text):
        paths = [p for p in PATH.findall(section) if (ROOT / p).is_file()]
        paths += [
            folder + name
            for folder, row in ROW.findall(section)
            for name in ROW_FILE.findall(row)
            if name.endswith(".py") and (ROOT / folder / name).is_file()
        ]
        known: set[str] = set()
        for p in set(paths):
            known |= defined(ROOT / p)
        for name in NAME.findall(section):
            if name in EXTERNAL or name.rsplit(".", 1)[-1] in FILE_SUFFIXES:
                continue
            if any(part not in known for part in name.split(".")):
                out.append(name)
    return out


def test_every_module_the_map_names_exists() -> None:
    text = DOC.read_text("utf-8")
    assert len(module_paths(text)) >= 60, "the paths name the modules they visit"
    assert missing_paths(text) == []


def test_every_file_of_the_packages_table_exists() -> None:
    text = DOC.read_text("utf-8")
    assert len(ROW.findall(text)) >= 15
    assert missing_table_files(text) == []


def test_the_packages_table_lists_every_module() -> None:
    assert unlisted_modules(DOC.read_text("utf-8")) == []


def test_every_code_name_is_defined_where_its_section_says() -> None:
    text = DOC.read_text("utf-8")
    assert len(NAME.findall(text)) >= 150
    assert undefined_names(text) == []


def test_the_map_tells_no_history() -> None:
    text = DOC.read_text("utf-8")
    assert re.search(r"\bissues? #?\d+", text, re.IGNORECASE) is None


def test_the_checks_can_fail() -> None:
    text = (
        "## A path\n"
        "1. `streams/processor.py` `BatchProcessor.handle` → `streams/nowhere.py` `gone`\n"
        "2. `streams/control.py` `apply_controls`, `BatchProcessor.nothing`\n"
        "3. `is_transient` is not named by this section's modules (plain storage/pool.py)\n"
        "## Packages\n"
        "| `streams/kafka/` | `publish.py`, `vanished.py` |\n"
    )
    assert module_paths(text) == [
        "storage/pool.py",
        "streams/control.py",
        "streams/nowhere.py",
        "streams/processor.py",
    ]
    assert missing_paths(text) == ["streams/nowhere.py"]
    assert missing_table_files(text) == ["streams/kafka/vanished.py"]
    assert undefined_names(text) == ["gone", "BatchProcessor.nothing", "is_transient"]
    table = "| `streams/kafka/` | `publish.py` |\n"
    unlisted = unlisted_modules(table)
    assert "streams/kafka/topics.py" in unlisted  # a module the row leaves out
    assert "streams/processor.py" in unlisted  # a folder without a row
    assert "streams/kafka/publish.py" not in unlisted
    # A table row's modules define names for its own section only.
    assert undefined_names("## T\n| `streams/kafka/` | `publish.py`: `send_in_batches` |") == [
        "send_in_batches"
    ]
