"""Write ``tests/golden/*.bin`` from the fixed inputs in ``test_golden.py``.

Run once, commit the outputs: ``.venv/bin/python tests/unit/make_golden.py``.
Re-run only for a deliberate, backward-compatible schema change (and keep the old
files decoding: register the old writer schema in ``schemas.codec``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _cases() -> dict[str, tuple[object, object, object]]:
    spec = importlib.util.spec_from_file_location("_golden_cases", HERE / "test_golden.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.GOLDEN_CASES  # type: ignore[no-any-return]


def main() -> None:
    out = HERE.parent / "golden"
    out.mkdir(exist_ok=True)
    for name, (obj, encode, _decode) in sorted(_cases().items()):
        data = encode(obj)  # type: ignore[operator]
        (out / name).write_bytes(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
