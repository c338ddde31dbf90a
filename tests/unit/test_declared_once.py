"""One declaration per concept (issue 40 item 2): no record class of the product is
declared twice, field for field or by name, whether in two modules or in one (a record
beside its JSON TypedDict is a copy: write the record's JSON from it, ``asdict``).

The walk reads every product module with ``ast`` and collects its record classes
(dataclasses, pydantic models, TypedDicts, NamedTuples, and their subclasses). Two of them
are one concept declared twice when they share a name or the same set of three or more
fields. A class that derives from the other (``class Release(answers.Release)``) is not
a copy. Pairs that are truly different concepts are allowed below, each with its reason;
``PENDING`` lists the copies not yet folded into one declaration — the test fails when
one of them is gone (take it off the list) or when a new copy appears."""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("schemas", "domain", "storage", "streams", "services", "devstack")
RECORD_BASES = {"BaseModel", "BaseSettings", "TypedDict", "NamedTuple"}
MIN_FIELDS = 3

# Same name or same fields, different concepts: (module, class) pairs, with why.
ALLOWED: dict[frozenset[str], str] = {
    frozenset(
        (
            "domain/caching/replay.py:Block",
            "domain/context/call_view.py:Block",
        )
    ): "a cache replay's prefix block vs a block of a call's inspector view",
    frozenset(
        (
            "domain/commit.py:Candidate",
            "domain/window/active_skills.py:Candidate",
        )
    ): "a summary offered for commit vs a skill offered to stay active",
    frozenset(
        (
            "schemas/answers/prepared.py:Decision",
            "domain/auth.py:Decision",
            "storage/records/authored.py:Decision",
        )
    ): "what became of a block vs an access decision vs a decision an agent recorded",
    frozenset(
        (
            "domain/compaction/drafts.py:Fact",
            "domain/rollup.py:Fact",
        )
    ): "a summary draft's fact entry vs an analytics roll-up fact",
    frozenset(
        (
            "schemas/answers/prepared.py:Inherited",
            "storage/records/threads.py:Inherited",
        )
    ): "the answer's inherited watermark vs the records a child thread inherits",
    frozenset(
        (
            "services/prepare/bootstrap.py:Options",
            "devstack/serve.py:Options",
        )
    ): "the Prepare process's options vs the local stack's `make serve` options",
    frozenset(
        (
            "schemas/answers/diagnostics.py:ReadBack",
            "services/prepare/readback.py:ReadBack",
        )
    ): "a block's read-back reference in the inspector vs the read-back use case",
    frozenset(
        (
            "domain/policy/retraction_rules.py:Refusal",
            "storage/sessions.py:Refusal",
        )
    ): "why a retraction is refused vs the processor's stored refusal of an event",
    frozenset(
        (
            "domain/caching/replay.py:Sent",
            "services/sdk/key_check.py:Sent",
        )
    ): "a request the cache replay saw sent vs a request the SDK's key check sent",
    frozenset(
        (
            "schemas/contracts.py:Source",
            "domain/context/sent_view.py:Source",
        )
    ): "an event's producer vs a sent block's source record",
    frozenset(
        (
            "domain/usage.py:Usage",
            "storage/calls/model_calls.py:Usage",
        )
    ): "a provider's usage by token kind vs a stored (estimate, reported) pair",
    frozenset(
        (
            "streams/envelopes.py:_Cached",
            "services/compaction/job_records.py:_Cached",
        )
    ): "private cache entries of two unrelated caches",
    frozenset(
        (
            "devstack/probe_world.py:Target",
            "services/prepare/assembly/prepare_context.py:Target",
        )
    ): "what a hostile probe aims at vs what one prepare builds",
    frozenset(
        (
            "domain/compaction/control/effects.py:JobFinish",
            "storage/compaction/view.py:JobStatus",
        )
    ): "the processor's write finishing a job vs what a waiting prepare reads back",
}

# Copies still to fold into one declaration: each a known debt, with what folding it takes.
PENDING: set[frozenset[str]] = set()


@dataclass(frozen=True)
class Record:
    module: str
    name: str
    fields: frozenset[str]
    bases: frozenset[str]

    @property
    def key(self) -> str:
        return f"{self.module}:{self.name}"


def _is_record(node: ast.ClassDef, records: set[str]) -> bool:
    if any("dataclass" in ast.unparse(d) for d in node.decorator_list):
        return True
    bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
    return bool(bases & (RECORD_BASES | records))


def _fields(node: ast.ClassDef) -> frozenset[str]:
    return frozenset(
        n.target.id
        for n in node.body
        if isinstance(n, ast.AnnAssign)
        and isinstance(n.target, ast.Name)
        and "ClassVar" not in ast.unparse(n.annotation)
    )


def records_of(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[Record]:
    out: list[Record] = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text("utf-8"))
            named: set[str] = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and _is_record(node, named):
                    named.add(node.name)
                    bases = frozenset(ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases)
                    rel = path.relative_to(root).as_posix()
                    out.append(Record(rel, node.name, _fields(node), bases))
    return out


def copies(records: list[Record]) -> set[frozenset[str]]:
    """Groups of classes, in one module or several, sharing a name or a field set of at
    least ``MIN_FIELDS`` fields, a class derived from another of its group left out."""
    groups: dict[object, list[Record]] = defaultdict(list)
    for r in records:
        groups[("name", r.name)].append(r)
        if len(r.fields) >= MIN_FIELDS:
            groups[("fields", r.fields)].append(r)
    out: set[frozenset[str]] = set()
    for members in groups.values():
        kept = [r for r in members if not any(o is not r and o.name in r.bases for o in members)]
        if len({r.key for r in kept}) > 1:
            out.add(frozenset(r.key for r in kept))
    return out


def _merged(found: set[frozenset[str]]) -> set[frozenset[str]]:
    """A pair found by its name and by its fields is one finding."""
    return {g for g in found if not any(g < other for other in found)}


def test_no_record_is_declared_twice() -> None:
    found = _merged(copies(records_of()))
    unexplained = sorted(sorted(g) for g in found - set(ALLOWED) - PENDING)
    assert unexplained == [], (
        "declared twice (derive one from the other, reuse one type, or allow the pair"
        f" with a reason if they are different concepts): {unexplained}"
    )


def test_the_lists_hold_only_what_the_walk_finds() -> None:
    found = _merged(copies(records_of()))
    stale = sorted(sorted(g) for g in (set(ALLOWED) | PENDING) - found)
    assert stale == [], f"no longer found (take them off the list): {stale}"


@pytest.mark.parametrize(
    ("second", "found"),
    [
        ("@dataclass\nclass Plan:\n    a: int\n    b: int\n    c: int\n", True),
        ("class Other(BaseModel):\n    a: int\n    b: int\n    c: int\n", True),
        ("class Plan(BaseModel):\n    x: int\n", True),
        ("class Plan(first.Plan):\n    extra: int\n", False),
        ("class Other(BaseModel):\n    a: int\n    b: int\n", False),
    ],
)
def test_the_walk_finds_a_copy_by_name_or_fields(tmp_path: Path, second: str, found: bool) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    header = "from dataclasses import dataclass\nfrom pydantic import BaseModel\n"
    first = "@dataclass\nclass Plan:\n    a: int\n    b: int\n    c: int\n"
    (pkg / "first.py").write_text(header + first)
    (pkg / "second.py").write_text(header + second)
    assert bool(copies(records_of(tmp_path, ("pkg",)))) is found


@pytest.mark.parametrize(
    ("second", "found"),
    [
        # a record beside its JSON, field for field (the folded OpenCall / OpenCallJson)
        ("class PlanJson(TypedDict):\n    a: int\n    b: int\n    c: str\n", True),
        ("class Other(BaseModel):\n    a: int\n    b: int\n    d: int\n", False),
        ("class Wider(Plan):\n    d: int\n", False),
    ],
)
def test_the_walk_finds_a_copy_in_the_same_module(tmp_path: Path, second: str, found: bool) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    header = "from typing import TypedDict\nfrom pydantic import BaseModel\n"
    first = "class Plan(BaseModel):\n    a: int\n    b: int\n    c: int\n"
    (pkg / "only.py").write_text(header + first + second)
    assert bool(copies(records_of(tmp_path, ("pkg",)))) is found
