"""Write the Prepare service's OpenAPI document: ``python -m services.prepare.http.openapi``.

The committed copy (``docs/openapi.json``) is the published contract; a unit test fails
when the code and the published document disagree.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import JsonValue

from services.prepare.http.api import create_api

DOC = Path(__file__).resolve().parents[3] / "docs" / "openapi.json"


def document() -> dict[str, JsonValue]:
    # Routes only reference the service when called, so none is needed to describe them.
    return create_api(None).openapi()  # type: ignore[arg-type]


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


def main() -> None:
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(render())
    print(f"wrote {DOC}", file=sys.stderr)


if __name__ == "__main__":
    main()
