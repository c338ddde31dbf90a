"""The Python contract types and ``context_event.avsc`` must not drift apart."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from enum import StrEnum
from importlib import resources
from typing import Any, Union

import pytest

from schemas import contracts
from schemas.contracts import (
    NAMESPACE,
    PAYLOAD_FOR_KIND,
    PAYLOAD_TYPES,
    Authority,
    ContextEvent,
    RecordKind,
    ToolStatus,
    Visibility,
)

_PY_RECORDS: dict[str, type] = {
    "ContextEvent": contracts.ContextEvent,
    "Scope": contracts.Scope,
    "Source": contracts.Source,
    "Content": contracts.Content,
    "UserInputPayload": contracts.UserInputPayload,
    "AssistantMessagePayload": contracts.AssistantMessagePayload,
    "ToolCallPayload": contracts.ToolCallPayload,
    "ToolOutcomePayload": contracts.ToolOutcomePayload,
    "ResourceActivationPayload": contracts.ResourceActivationPayload,
    "ChildResultPayload": contracts.ChildResultPayload,
    "RunLifecyclePayload": contracts.RunLifecyclePayload,
    "RetractionPayload": contracts.RetractionPayload,
    "PlanPayload": contracts.PlanPayload,
    "PlanItem": contracts.PlanItem,
    "ConstraintPayload": contracts.ConstraintPayload,
    "DecisionPayload": contracts.DecisionPayload,
    "QuestionPayload": contracts.QuestionPayload,
    "ToolCallSpec": contracts.ToolCallSpec,
    "SkillRef": contracts.SkillRef,
}
_PY_ENUMS: dict[str, type[StrEnum]] = {
    "RecordKind": RecordKind,
    "Authority": Authority,
    "Visibility": Visibility,
    "ToolStatus": ToolStatus,
}


def _schema() -> dict[str, Any]:
    text = resources.files("schemas").joinpath("avro", "context_event.avsc").read_text("utf-8")
    return typing.cast(dict[str, Any], json.loads(text))


def _walk(schema: Any, records: dict[str, dict[str, Any]], enums: dict[str, list[str]]) -> None:
    """Collect every named record and enum defined anywhere in ``schema``."""
    if isinstance(schema, list):
        for s in schema:
            _walk(s, records, enums)
    elif isinstance(schema, dict):
        t = schema.get("type")
        if t == "record":
            records[schema["name"]] = schema
            for f in schema["fields"]:
                _walk(f["type"], records, enums)
        elif t == "enum":
            enums[schema["name"]] = schema["symbols"]
        elif t == "array":
            _walk(schema["items"], records, enums)
        elif isinstance(t, (dict, list)):
            _walk(t, records, enums)


def _collect() -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    records: dict[str, dict[str, Any]] = {}
    enums: dict[str, list[str]] = {}
    _walk(_schema(), records, enums)
    return records, enums


def _is_nullable_union(avro_type: Any) -> bool:
    return isinstance(avro_type, list) and "null" in avro_type


def _is_optional_hint(hint: Any) -> bool:
    return typing.get_origin(hint) in (Union, types.UnionType) and type(None) in typing.get_args(
        hint
    )


def test_every_avro_record_has_a_python_type_and_back() -> None:
    records, enums = _collect()
    assert set(records) == set(_PY_RECORDS)
    assert set(enums) == set(_PY_ENUMS)


def test_contract_types_match_avro_schema() -> None:
    records, _ = _collect()
    problems: list[str] = []
    for name, cls in _PY_RECORDS.items():
        avro_fields = {f["name"]: f for f in records[name]["fields"]}
        py_fields = {f.name for f in dataclasses.fields(cls)}
        if set(avro_fields) != py_fields:
            problems.append(
                f"{name}: avro-only {sorted(set(avro_fields) - py_fields)},"
                f" python-only {sorted(py_fields - set(avro_fields))}"
            )
            continue
        hints = typing.get_type_hints(cls)
        for fname, f in avro_fields.items():
            avro_opt = _is_nullable_union(f["type"])
            py_opt = _is_optional_hint(hints[fname])
            if avro_opt != py_opt:
                problems.append(
                    f"{name}.{fname}: avro nullable={avro_opt}, python Optional={py_opt}"
                )
    assert problems == []


def test_avro_defaults_match_python_defaults() -> None:
    """A field that may be omitted on the wire may be omitted in Python too, with the
    same value, and a required Avro field has no Python default."""
    records, _ = _collect()
    problems: list[str] = []
    for name, cls in _PY_RECORDS.items():
        py = {f.name: f for f in dataclasses.fields(cls)}
        for f in records[name]["fields"]:
            pf = py[f["name"]]
            if pf.default is not dataclasses.MISSING:
                py_default: Any = pf.default
            elif pf.default_factory is not dataclasses.MISSING:
                py_default = pf.default_factory()
            else:
                py_default = dataclasses.MISSING
            if "default" not in f:
                if py_default is not dataclasses.MISSING:
                    problems.append(f"{name}.{f['name']}: python default, avro none")
                continue
            wire = list(py_default) if isinstance(py_default, tuple) else py_default
            if isinstance(wire, StrEnum):
                wire = str(wire)
            if wire != f["default"]:
                problems.append(f"{name}.{f['name']}: python {wire!r} vs avro {f['default']!r}")
    assert problems == []


@pytest.mark.parametrize("enum_name", sorted(_PY_ENUMS))
def test_enum_symbols_match(enum_name: str) -> None:
    _, enums = _collect()
    assert enums[enum_name] == [e.value for e in _PY_ENUMS[enum_name]]


def test_payload_union_branches_match_payload_types() -> None:
    payload_field = next(f for f in _schema()["fields"] if f["name"] == "payload")
    branches = [b["name"] for b in payload_field["type"]]
    assert branches == [t.AVRO_NAME for t in PAYLOAD_TYPES]
    assert all(t.__name__ == t.AVRO_NAME for t in PAYLOAD_TYPES)


def test_every_kind_has_a_payload_type() -> None:
    assert set(PAYLOAD_FOR_KIND) == set(RecordKind)
    assert set(PAYLOAD_FOR_KIND.values()) == set(PAYLOAD_TYPES)


def test_to_avro_names_the_union_branch() -> None:
    from .factories import make_event

    ev = make_event(RecordKind.RUN_STARTED)
    wire = ev.to_avro()
    assert wire["payload"] == (
        f"{NAMESPACE}.RunLifecyclePayload",
        {"reason": None, "release_id": None},
    )
    assert wire["kind"] == "run_started" and type(wire["kind"]) is str
    assert ContextEvent.from_avro(wire) == ev


@pytest.mark.spec("R3.4")
def test_content_text_and_reference() -> None:
    c = contracts.Content.text("héllo")
    assert c.length == 6  # UTF-8 bytes, not characters
    assert c.sha256 == hashlib.sha256("héllo".encode()).hexdigest()
    assert c.inline == "héllo" and c.ref is None
    r = contracts.Content.reference("ab" * 32, 10_000)
    assert r.ref == r.sha256 == "ab" * 32 and r.inline is None and r.length == 10_000


def test_built_is_the_instance_init_would_build() -> None:
    """``built`` (no ``__init__``, issue 13) gives an equal, equally hashed instance, and
    is used only for classes without ``__post_init__`` (which it would skip)."""
    from schemas.wire import CommittedRecord

    fields = {f.name: f"v{i}" for i, f in enumerate(dataclasses.fields(CommittedRecord))}
    made, via_init = contracts.built(CommittedRecord, dict(fields)), CommittedRecord(**fields)
    assert made == via_init and hash(made) == hash(via_init) and repr(made) == repr(via_init)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.record_id = "changed"  # type: ignore[misc]
    for cls in (ContextEvent, contracts.Scope, contracts.Source, contracts.Content):
        assert not hasattr(cls, "__post_init__"), cls


def test_from_avro_builds_every_field_of_the_envelope() -> None:
    from .factories import make_event

    for kind in RecordKind:
        ev = make_event(kind)
        back = ContextEvent.from_avro(ev.to_avro())
        assert back == ev
        for part in (back, back.scope, back.source, back.content):
            names = {f.name for f in dataclasses.fields(part)}  # type: ignore[arg-type]
            assert set(part.__dict__) == names, type(part)
