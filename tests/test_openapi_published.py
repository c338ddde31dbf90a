"""The published OpenAPI document matches the code."""

from __future__ import annotations

from services.prepare.http.openapi import DOC, render


def test_published_openapi_document_is_current() -> None:
    assert DOC.read_text() == render(), (
        "docs/openapi.json is stale: run `python -m services.prepare.http.openapi`"
    )


def test_openapi_lists_the_runtime_operations() -> None:
    import json

    paths = json.loads(DOC.read_text())["paths"]
    assert "/v1/sessions/{session_id}/runs" in paths
    assert "/v1/sessions/{session_id}/runs/{run_id}/prepare" in paths
    assert "/v1/releases" in paths
