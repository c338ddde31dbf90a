"""The records the domain builds and an answer publishes as they are (issue 40 item 2):
declared once in ``schemas/answers`` as frozen dataclasses; the published schema requires
each of their fields, and an answer writes exactly those fields."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from domain.context.assemble import sha256
from domain.frontier import Constraint, Plan
from domain.window.budget import Calibration, calibrate
from schemas.answers import diagnostics, prepared
from schemas.answers.diagnostics import CallCost
from schemas.answers.prepared import FrontierState, ProtectedBlock
from schemas.contracts import PlanItem
from services.prepare.http.answer_json import AnswerResponse
from services.prepare.http.openapi import DOC

RECORDS = [
    cls
    for module in (diagnostics, prepared)
    for cls in vars(module).values()
    if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__
]


def test_the_answers_declare_the_records_the_domain_builds() -> None:
    assert {c.__name__ for c in RECORDS} >= {
        "BarSegment",
        "BudgetBar",
        "SummaryLink",
        "CallCost",
        "ProtectedBlock",
        "CalibrationState",
        "Plan",
        "Constraint",
    }
    assert (Plan, Constraint, Calibration) == (
        prepared.Plan,
        prepared.Constraint,
        prepared.CalibrationState,
    )


@pytest.mark.parametrize("record", RECORDS, ids=lambda c: c.__name__)
def test_a_published_record_requires_every_field_and_names_no_default(record: type) -> None:
    schema = json.loads(DOC.read_text("utf-8"))["components"]["schemas"][record.__name__]
    names = [f.name for f in dataclasses.fields(record)]
    assert schema["required"] == names
    assert [n for n, p in schema["properties"].items() if "default" in p] == []


@pytest.mark.spec("R10.5", "R4.4")
def test_an_answer_writes_a_record_with_exactly_its_fields() -> None:
    block = ProtectedBlock("b1", "instruction", "system", "system", sha256("x"), ("r1",))
    plan = Plan(version=2, record_id="rec_1", items=(PlanItem("p1", "write it", "pending"),))
    frontier = FrontierState(
        task_version=1, plan_version=2, constraints_version=0, plan=plan, constraints=[]
    )

    class Answer(BaseModel):
        manifest: list[ProtectedBlock]
        frontier: FrontierState
        calibration: Calibration
        cost: CallCost

    cal = calibrate(Calibration(), 1000, 1234)
    answer = Answer(
        manifest=[block],
        frontier=frontier,
        calibration=cal.rounded(),
        cost=CallCost(reported=False),
    )
    written: dict[str, Any] = orjson.loads(bytes(AnswerResponse(answer).body))
    assert written["manifest"] == [block.to_dict()]
    assert written["frontier"]["plan"] == plan.to_dict()
    assert written["calibration"] == {"factor": 1.234, "samples": 1, "last_drift": 0.234}
    assert list(written["cost"]) == [f.name for f in dataclasses.fields(CallCost)]
    assert written == answer.model_dump(mode="json")
