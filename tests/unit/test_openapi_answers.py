"""Every 2xx answer of the Prepare API has a published schema (docs/openapi.json), and
the answers the use cases build fit the models that schema is made from."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from schemas.answers.prepared import ModelCall, ModelResult, PreparedContext
from services.prepare.bodies import ModelCallIn, ModelResultIn, PrepareIn
from services.prepare.http.answer_json import AnswerResponse
from services.prepare.http.openapi import DOC
from tests.unit.test_prepare_context_gateway import history, world

METHODS = ("get", "put", "post", "delete", "patch")


def untyped(schema: dict[str, Any], components: dict[str, Any]) -> str | None:
    """Why ``schema`` does not type an answer: empty, or a bare free-form object; None
    when it names a component with properties (or is a typed object itself)."""
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        target = components.get(name)
        if target is None:
            return f"$ref to a missing component {name}"
        return None if target.get("properties") else f"component {name} has no properties"
    if schema.get("type") == "object" and schema.get("properties"):
        return None
    return f"untyped schema {json.dumps(schema)[:80]}"


def problems(doc: dict[str, Any]) -> list[str]:
    components = doc.get("components", {}).get("schemas", {})
    out = []
    for path, item in doc["paths"].items():
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            for status, resp in op.get("responses", {}).items():
                if not status.startswith("2"):
                    continue
                schema = resp.get("content", {}).get("application/json", {}).get("schema")
                why = (
                    "no application/json schema" if schema is None else untyped(schema, components)
                )
                if why is not None:
                    out.append(f"{method.upper()} {path} {status}: {why}")
    return out


def test_every_2xx_answer_in_the_published_document_has_a_typed_schema() -> None:
    assert problems(json.loads(DOC.read_text())) == []


def test_the_walk_fails_on_a_free_form_answer() -> None:
    doc = {
        "paths": {
            "/x": {
                "get": {
                    "responses": {
                        "200": {
                            "content": {
                                "application/json": {
                                    "schema": {"type": "object", "additionalProperties": True}
                                }
                            }
                        }
                    }
                }
            }
        },
        "components": {"schemas": {}},
    }
    assert problems(doc) == [
        "GET /x 200: untyped schema " + json.dumps({"type": "object", "additionalProperties": True})
    ]


@pytest.mark.spec("R4.1", "R6.1", "R10.5", "R15.1")
async def test_prepare_gateway_and_result_answers_fit_their_models() -> None:
    w = await world()
    history(w, 1, 10)
    first = await w.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion", render=True))
    # The use cases build the large answers without validation: what the routes write
    # (``AnswerResponse``) is validated here against the published models.
    assert PreparedContext.model_validate_json(written(first)).provider is not None
    call = await w.svc.gateway.model_call("s1", "r1", ModelCallIn(prepared_id=first.prepared_id))
    checked = ModelCall.model_validate_json(written(call))
    assert checked.budget.final_estimated_input_raw is not None
    replay = await w.svc.gateway.model_call("s1", "r1", ModelCallIn(prepared_id=first.prepared_id))
    assert ModelCall.model_validate_json(written(replay)).idempotent_replay
    usage = {"input_tokens": 2 * int(call.budget.final_estimated_input_raw)}
    result = await w.svc.gateway.model_result("s1", call.call_id, ModelResultIn(usage=usage))
    assert ModelResult.model_validate_json(written(result)).drift is not None
    # Calibrated now: the budget carries the calibration and the calibrated input.
    second = await w.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    assert PreparedContext.model_validate_json(written(second)).budget.calibration is not None


def written(answer: BaseModel) -> bytes:
    return bytes(AnswerResponse(answer).body)


def test_a_changed_field_type_is_refused_by_the_model() -> None:
    with pytest.raises(ValueError):
        ModelResult.model_validate({"call_id": "c", "status": "completed", "drift": 3})
