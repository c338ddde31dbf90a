"""What every command shares: exit codes, ``--json`` output and error reporting.

Exit codes: 0 ok, 1 an error (a broker or database out of reach, a refused publish),
2 a usage or validation error (typer's own usage errors are 2 as well).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from schemas.errors import ContextError, InvalidPolicy

OK, ERROR, INVALID = 0, 1, 2
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

JsonOption = Annotated[
    bool, typer.Option("--json", help="print JSON for scripts instead of tables")
]


def dump(data: Any) -> None:
    """JSON on stdout, nothing else (scripts parse it)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def show(as_json: bool, data: Any, render: Callable[[], None]) -> None:
    if as_json:
        dump(data)
    else:
        render()


def fail(exc: Exception, as_json: bool = False) -> NoReturn:
    """Report ``exc`` and exit: 2 for invalid input, 1 for anything else."""
    code = INVALID if isinstance(exc, InvalidPolicy | typer.BadParameter) else ERROR
    body = (
        exc.to_dict()
        if isinstance(exc, ContextError)
        else {"code": type(exc).__name__, "message": str(exc)}
    )
    if as_json:
        dump({"ok": False, "error": body})
    else:
        err.print(f"[bold red]error[/] {body['code']}: {body['message']}")
    raise typer.Exit(code)
