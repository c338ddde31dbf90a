"""No ``dict[str, Any]`` returned by a use case or a storage port (issue 40 item 2).

The walk reads every module of the Prepare use cases, the compaction service, the
summarizers and the storage layer with ``ast`` and lists each function whose return
annotation holds an untyped string-keyed mapping: ``dict``, ``Dict``, ``Mapping`` or
``MutableMapping`` of ``[str, Any]``, alone or inside another type (``list[dict[str, Any]]``,
``dict[str, Any] | None``, an awaitable's). A function answers a typed value instead: a
record, a TypedDict, or ``dict[str, JsonValue]`` for JSON whose shape is another party's
(a provider's request and response bodies)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("services/prepare", "services/compaction", "services/summarizers", "storage")
MAPPINGS = {"dict", "Dict", "Mapping", "MutableMapping"}


def _untyped_mapping(node: ast.expr) -> bool:
    """``node`` or a type inside it is a ``str``-keyed mapping of ``Any``."""
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Subscript) or not isinstance(sub.slice, ast.Tuple):
            continue
        name = ast.unparse(sub.value).rsplit(".", 1)[-1]
        args = [ast.unparse(a).rsplit(".", 1)[-1] for a in sub.slice.elts]
        if name in MAPPINGS and args == ["str", "Any"]:
            return True
    return False


def _annotation(node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.expr | None:
    """The return annotation as an expression (a string annotation parsed)."""
    ret = node.returns
    if isinstance(ret, ast.Constant) and isinstance(ret.value, str):
        return ast.parse(ret.value, mode="eval").body
    return ret


def untyped_returns(root: Path = ROOT, folders: tuple[str, ...] = FOLDERS) -> list[str]:
    """``path:line name -> annotation`` of each function returning such a mapping."""
    found: list[str] = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text("utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                ret = _annotation(node)
                if ret is not None and _untyped_mapping(ret):
                    rel = path.relative_to(root).as_posix()
                    found.append(f"{rel}:{node.lineno} {node.name} -> {ast.unparse(ret)}")
    return found


def test_no_use_case_or_storage_port_returns_an_untyped_dict() -> None:
    found = untyped_returns()
    assert found == [], "return a record, a TypedDict or dict[str, JsonValue]:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("annotation", "found"),
    [
        ("dict[str, Any]", True),
        ("'dict[str, Any]'", True),
        ("list[dict[str, Any]] | None", True),
        ("typing.Dict[str, typing.Any]", True),
        ("Mapping[str, Any]", True),
        ("tuple[int, Dict[str, Any]]", True),
        ("dict[str, JsonValue]", False),
        ("dict[str, int]", False),
        ("Mapping[str, object]", False),
        ("AnswerJson", False),
    ],
)
def test_the_walk_finds_an_untyped_dict_return(
    tmp_path: Path, annotation: str, found: bool
) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "use_case.py").write_text(f"async def answer() -> {annotation}:\n    ...\n")
    assert bool(untyped_returns(tmp_path, ("pkg",))) is found
