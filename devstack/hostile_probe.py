"""``make probe`` (``python -m devstack.hostile_probe``): a hostile tenant tries the
running deployment over the bus, Prepare's API and the console (issue 38).

It provisions two fresh spaces on the running services (``make serve``) the operator's
way — keys as ``agentloom-keys`` issues them, B's broker principal as
``streams.kafka.provision --runtime`` adds it — gives A a session with a few records, a
prepared context and a model call, then acts as tenant B with B's credentials only and
checks that each attack is refused the way docs/security.md says ("Probing as a hostile
tenant"). When it ends (also on a failure or Ctrl-C) it revokes the keys it issued and
removes B's principal: nothing it made can log in or call afterwards. Progress goes to
the terminal as each probe ends; a table at the end; every result in
``build/probe/hostile.json``. Exit 0 only when every probe is ok.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console
from rich.table import Table

from devstack.probe_bus import bus_probes
from devstack.probe_console import console_probes
from devstack.probe_http import http_probes, last_probes
from devstack.probe_world import ProbeResult, Target, World, provisioned
from devstack.serve import read_stack_env
from schemas.settings import Settings
from services.console.settings import ConsoleSettings

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "build" / "probe" / "hostile.json"


async def run_probe(
    target: Target, report: Callable[[ProbeResult], None] = lambda r: None
) -> list[ProbeResult]:
    """Every probe against ``target`` in a world provisioned for the run (and cleaned
    up after it: ``probe_world.provisioned``); ``report`` hears each result as it ends."""
    async with provisioned(target) as world:
        return await probes(world, report)


async def probes(world: World, report: Callable[[ProbeResult], None]) -> list[ProbeResult]:
    """Every probe in ``world``, in order (bus, HTTP, console; the probe that changes
    what B's names resolve to last)."""
    results = await bus_probes(world, report)
    results += await http_probes(world, report)
    results += await console_probes(world, report)
    results += await last_probes(world, report)
    return results


async def reachable(target: Target) -> list[str]:
    """The services that do not answer their health check (the probe needs them up)."""
    down = []
    async with httpx.AsyncClient(timeout=3) as http:
        for name, url in (("prepare", target.prepare_url), ("console", target.console_url)):
            try:
                ok = (await http.get(f"{url}/healthz")).status_code == 200
            except httpx.HTTPError:
                ok = False
            if not ok:
                down.append(f"{name} at {url}")
    return down


def table(results: list[ProbeResult]) -> Table:
    t = Table(title="hostile-tenant probe", show_lines=False)
    for col in ("", "surface", "probe", "expected", "observed"):
        t.add_column(col, overflow="fold")
    for r in results:
        mark = "[green]ok[/]" if r.ok else "[red]FAIL[/]"
        t.add_row(mark, r.surface, r.name, r.expected, r.observed)
    return t


def write_report(path: Path, target: Target, results: list[ProbeResult], took: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "ok": all(r.ok for r in results) and bool(results),
        "seconds": round(took, 2),
        "prepare_url": target.prepare_url,
        "console_url": target.console_url,
        "records_topic": target.settings.topic_records,
        "probes": [dataclasses.asdict(r) for r in results],
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")


def local_target(prepare_url: str | None, console_url: str | None) -> Target:
    """The local stack's settings (``.state/stack.env`` under what the environment
    sets, as ``agentloom serve`` reads them) and the services' default addresses."""
    for k, v in read_stack_env().items():
        os.environ.setdefault(k, v)
    s = Settings()
    return Target(
        s,
        prepare_url or f"http://{s.prepare_host}:{s.prepare_port}",
        console_url or f"http://{s.prepare_host}:{ConsoleSettings().port}",
    )


app = typer.Typer(add_completion=False)


@app.command()
def probe(
    prepare_url: Annotated[str | None, typer.Option(help="Prepare's base URL")] = None,
    console_url: Annotated[str | None, typer.Option(help="the console's base URL")] = None,
    out: Annotated[Path, typer.Option(help="where the JSON report goes")] = OUT,
) -> None:
    """Probe the running services (``make serve``) as a hostile tenant."""
    console = Console()
    target = local_target(prepare_url, console_url)
    if down := asyncio.run(reachable(target)):
        console.print(f"[red]not running[/]: {', '.join(down)} — start `make serve` first")
        raise typer.Exit(1)

    def report(r: ProbeResult) -> None:
        mark = "[green]ok[/]  " if r.ok else "[red]FAIL[/]"
        console.print(f"\\[probe] {mark} {r.surface:<7} {r.name}")

    started = time.monotonic()
    console.print(f"\\[probe] two spaces on {target.prepare_url}, {target.console_url} ...")
    results = asyncio.run(run_probe(target, report))
    took = time.monotonic() - started
    console.print(table(results))
    write_report(out, target, results, took)
    failed = [r for r in results if not r.ok]
    console.print(f"{len(results) - len(failed)}/{len(results)} ok in {took:.1f} s; report {out}")
    raise typer.Exit(1 if failed or not results else 0)


def main() -> None:
    app(prog_name="python -m devstack.hostile_probe")


if __name__ == "__main__":
    main()
