"""The pure core must not reach for I/O frameworks: checked on the source with ``ast``
(importing would hide a lazy import inside a function, and would run module code). Every
import counts, at module level or inside a function, and so does a call that opens a file
or a package resource. The sub-packages import one another one way (no loops)."""

from __future__ import annotations

import ast
import functools
import itertools
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"asyncio", "faust", "aiokafka", "asyncpg", "fastapi", "httpx"}
# What "pure" means for a module: nothing in its import closure does I/O, reads the clock,
# the environment or randomness, switches the process's garbage collector, or binds it to
# a framework at the edges. Serialization (fastavro, json) and in-memory buffers are pure;
# loading a tokenizer (tiktoken) reads files.
IMPURE = FORBIDDEN | {
    "gc", "tiktoken", "io.open", "builtins",
    "os", "sys", "pathlib", "shutil", "tempfile", "socket", "ssl", "select", "signal",
    "subprocess", "threading", "multiprocessing", "concurrent", "logging", "time",
    "secrets", "random", "urllib", "http", "uvicorn", "starlette", "jinja2", "rich",
    "typer", "opentelemetry", "prometheus_client", "tenacity", "openai", "langchain_core",
    "agents", "pydantic_settings", "testcontainers",
}  # fmt: skip
PROJECT_PACKAGES = {"schemas", "domain", "storage", "streams", "services", "devstack", "benchmarks"}
# The pure core is a folder: every module under domain/ is pure, and every module of the
# layers above it (storage, streams, services, devstack) does I/O — pure logic found there
# belongs under domain/. schemas/ (the bottom layer: contracts, wire formats, settings,
# errors) may be either.
PURE_FOLDERS = ("domain",)
# Reading package data: schemas/ reads its own contract files (the Avro schemas,
# ``schemas/codec.py``); a module of the pure folder reads none.
PACKAGE_DATA = {"importlib"}
EDGE_FOLDERS = ("storage", "streams", "services", "devstack")


def _modules(folders: tuple[str, ...]) -> list[str]:
    return sorted(
        str(p.relative_to(ROOT))
        for folder in folders
        for p in (ROOT / folder).rglob("*.py")
        if p.name != "__init__.py"
    )


PURE_MODULES = _modules(PURE_FOLDERS)
EDGE_MODULES = _modules(EDGE_FOLDERS)


def _module_path(module: str) -> Path | None:
    return _module_path_under(str(ROOT), module)


@functools.lru_cache(maxsize=16384)
def _module_path_under(root: str, module: str) -> Path | None:
    base = Path(root).joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


# Calls that read or write a file or a package resource without importing anything new
# (``open`` is a builtin; ``read_text`` and friends are methods of paths and resources).
IO_CALLS = {"open", "input", "__import__", "breakpoint"}
IO_METHODS = {
    "read_text", "read_bytes", "write_text", "write_bytes", "open_text", "open_binary",
    "files", "as_file", "iterdir", "glob", "rglob", "unlink", "mkdir", "touch",
}  # fmt: skip


def _tree(path: Path) -> ast.Module:
    """``path`` parsed, once per version of the file (each check walks the import closure
    of its module: without this every module is parsed again for every test)."""
    return _parse(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=4096)
def _parse(path: str, _version: int) -> ast.Module:
    return ast.parse(Path(path).read_text("utf-8"), filename=path)


def _io_calls(path: Path) -> set[str]:
    """``line: name`` of every call in ``path`` that opens a file or a package resource."""
    return set(_cached(_find_io_calls, path))


def _cached(find: Callable[[Path], set[str]], path: Path) -> frozenset[str]:
    """``find(path)``, once per version of the file and project root: every check walks
    the import closure of its module, so without this each module is walked again for
    every test."""
    return _memo(find, str(path), path.stat().st_mtime_ns, str(ROOT))


@functools.lru_cache(maxsize=16384)
def _memo(find: Callable[[Path], set[str]], path: str, _version: int, _root: str) -> frozenset[str]:
    return frozenset(find(Path(path)))


def _find_io_calls(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(_tree(path)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in IO_CALLS:
            found.add(f"{node.lineno}: {func.id}()")
        elif isinstance(func, ast.Attribute) and func.attr in IO_METHODS:
            found.add(f"{node.lineno}: .{func.attr}()")
    return found


def _imports(path: Path) -> set[str]:
    """Every module named by an import statement anywhere in ``path`` (absolute names):
    at module level, inside a function or a class, under ``if TYPE_CHECKING`` alike."""
    return set(_cached(_find_imports, path))


def _find_imports(path: Path) -> set[str]:
    tree = _tree(path)
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


def test_the_pure_folder_is_found() -> None:
    assert "domain/context/rendering.py" in PURE_MODULES
    assert "domain/compaction/triggers.py" in PURE_MODULES
    assert "storage/pool.py" in EDGE_MODULES and "storage/pool.py" not in PURE_MODULES


def test_import_scanner_sees_io_modules() -> None:
    # The scanner must be able to fail: the processor's store adapter imports asyncpg.
    names = _imports(ROOT / "storage" / "records" / "store.py")
    assert "asyncpg" in names
    assert "domain.planning.state" in names


def _impure_imports(module: str) -> set[str]:
    """What in ``module``'s import closure does I/O: an impure import, or a call that opens
    a file or a package resource (those only in the pure folder: an edge module's closure
    is impure already)."""
    closure = _closure(module)
    found = {
        f"{where} imports {name}"
        for where, names in closure.items()
        for name in names
        if name.split(".")[0] in IMPURE
        or name in IMPURE
        or (name.split(".")[0] in PACKAGE_DATA and where.startswith(PURE_FOLDERS))
    }
    for where in closure:
        if where.startswith(PURE_FOLDERS):
            found |= {f"{where} calls {call}" for call in _io_calls(ROOT / where)}
    return found


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_module_imports_no_io_framework(module: str) -> None:
    assert _impure_imports(module) == set()


@pytest.mark.parametrize("module", EDGE_MODULES)
def test_no_module_outside_the_pure_folder_is_pure(module: str) -> None:
    """A module above domain/ whose imports do no I/O is pure logic in the wrong folder."""
    assert _impure_imports(module) != set(), f"{module} is pure: move it under domain/"


def test_the_purity_check_can_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "domain").mkdir()
    (tmp_path / "domain" / "bad.py").write_text("import time\n")
    (tmp_path / "domain" / "good.py").write_text("import json\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _impure_imports("domain/bad.py") == {"domain/bad.py imports time"}
    assert _impure_imports("domain/good.py") == set()


# What domain/ held before issue 40: a lazy tokenizer import, a package file read through
# importlib.resources, the garbage collector switched, and a file opened by a builtin.
OLD_TOKENS = """
class TiktokenCounter:
    def __init__(self, encoding: str) -> None:
        import tiktoken

        self._enc = tiktoken.get_encoding(encoding)
"""
OLD_DEFAULTS = """
import functools
import json
from importlib import resources


@functools.cache
def _load():
    return json.loads(resources.files("schemas").joinpath("x.json").read_text("utf-8"))
"""
OLD_RENDER_STATE = """
from contextlib import contextmanager


@contextmanager
def _built_to_keep():
    import gc

    gc.disable()
    yield
"""
OPENS_A_FILE = """
def read(path):
    with open(path) as f:
        return f.read()
"""


def test_the_purity_check_sees_lazy_imports_and_file_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "domain").mkdir()
    for name, text in [
        ("tokens", OLD_TOKENS),
        ("defaults", OLD_DEFAULTS),
        ("render_state", OLD_RENDER_STATE),
        ("opens", OPENS_A_FILE),
        ("uses", "from domain.tokens import TiktokenCounter\n"),
    ]:
        (tmp_path / "domain" / f"{name}.py").write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _impure_imports("domain/tokens.py") == {"domain/tokens.py imports tiktoken"}
    assert _impure_imports("domain/defaults.py") == {
        "domain/defaults.py imports importlib",
        "domain/defaults.py imports importlib.resources",
        "domain/defaults.py calls 9: .files()",
        "domain/defaults.py calls 9: .read_text()",
    }
    assert _impure_imports("domain/render_state.py") == {"domain/render_state.py imports gc"}
    assert _impure_imports("domain/opens.py") == {"domain/opens.py calls 3: open()"}
    # through the closure: a pure-looking module importing the lazy one is impure too
    assert _impure_imports("domain/uses.py") == {"domain/tokens.py imports tiktoken"}


# Layers, one direction (issue 11): schemas at the bottom, the pure domain above it, then
# storage, then streams, then services; tools (devstack, benchmarks) on top of everything.
# Each package may import only the packages below it.
LAYERS = ["schemas", "domain", "storage", "streams", "services", "devstack"]


def _back_imports(package: str) -> dict[str, list[str]]:
    higher = set(LAYERS[LAYERS.index(package) + 1 :]) | {"benchmarks", "tests"}
    offenders = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        up = {name.split(".")[0] for name in _imports(path)} & higher
        if up:
            offenders[str(path.relative_to(ROOT))] = sorted(up)
    return offenders


@pytest.mark.parametrize("package", LAYERS)
def test_no_import_runs_back_up(package: str) -> None:
    assert _back_imports(package) == {}


def test_back_import_check_can_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A tree with one storage module reaching up into services must fail.
    (tmp_path / "storage").mkdir()
    (tmp_path / "storage" / "bad.py").write_text("from services.prepare import api\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _back_imports("storage") == {"storage/bad.py": ["services"]}


def _module_graph() -> dict[str, set[str]]:
    """Product module -> the product modules it imports (by their longest existing name)."""
    graph: dict[str, set[str]] = {}
    for package in LAYERS:
        for path in (ROOT / package).rglob("*.py"):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            edges = graph.setdefault(module.removesuffix(".__init__"), set())
            for name in _imports(path):
                parts = name.split(".")
                found = (".".join(parts[:i]) for i in range(len(parts), 0, -1))
                target = next((m for m in found if _module_path(m) is not None), None)
                if target is not None:
                    edges.add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every back edge of a depth-first walk, as the cycle it closes."""
    cycles: list[list[str]] = []
    on_stack: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> None:
        on_stack.append(node)
        for target in sorted(graph.get(node, set()) - {node}):
            if target in on_stack:
                cycles.append([*on_stack[on_stack.index(target) :], target])
            elif target not in done and target in graph:
                visit(target)
        on_stack.pop()
        done.add(node)

    for module in sorted(graph):
        if module not in done:
            visit(module)
    return cycles


def test_no_import_cycle_between_modules() -> None:
    assert _cycles(_module_graph()) == []


def test_cycle_check_can_fail() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]


# Sub-packages (issue 40): within domain/, storage/, streams/ and services/, the parts of
# one package (its sub-packages and modules) import one another one way. An import from
# a.b.x to a.c.y is an edge between the siblings a.b and a.c (the children of their
# deepest common package); every import counts, module-level or inside a function.
SUBPACKAGED = ("domain", "storage", "streams", "services")


def _sibling_graph(graph: dict[str, set[str]]) -> dict[str, dict[str, set[str]]]:
    """sibling -> sibling it imports -> the module imports behind that edge."""
    edges: dict[str, dict[str, set[str]]] = {}
    for module, targets in graph.items():
        if module.split(".")[0] not in SUBPACKAGED:
            continue
        for target in targets:
            a, b = module.split("."), target.split(".")
            common = 0
            while common < min(len(a), len(b)) and a[common] == b[common]:
                common += 1
            # another top package (a layer), or a package importing its own __init__
            if common == 0 or common >= min(len(a), len(b)):
                continue
            here, there = ".".join(a[: common + 1]), ".".join(b[: common + 1])
            edges.setdefault(here, {}).setdefault(there, set()).add(f"{module} -> {target}")
    return edges


def _sibling_cycles() -> list[str]:
    edges = _sibling_graph(_module_graph())
    found = []
    for cycle in _cycles({k: set(v) for k, v in edges.items()}):
        why = [sorted(edges[a][b])[0] for a, b in itertools.pairwise(cycle)]
        found.append(" -> ".join(cycle) + f"  ({'; '.join(why)})")
    return found


def test_no_loop_between_sub_packages() -> None:
    cycles = _sibling_cycles()
    assert cycles == [], "\n".join(cycles)


def test_the_sub_package_loop_check_can_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # records -> compaction at module level; compaction -> records inside a function.
    for folder in ("storage/records", "storage/compaction"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "storage" / "records" / "store.py").write_text(
        "from storage.compaction.control import PgControlStore\n"
    )
    (tmp_path / "storage" / "compaction" / "control.py").write_text(
        "def lazy():\n    from storage.records import store\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _sibling_cycles() == [
        "storage.compaction -> storage.records -> storage.compaction"
        "  (storage.compaction.control -> storage.records;"
        " storage.records.store -> storage.compaction.control)"
    ]
