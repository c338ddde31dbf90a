"""``agentloom-keys``: create, list and revoke API keys (the admin/bootstrap path).

Run where the database is reachable (``ALC_PG_DSN``); the key is printed once and only
its sha256 is stored. There is no HTTP route that creates keys: whoever can run this
can already reach the database. A host key is issued under the key issuer secret
(``ALC_KEY_ISSUER_SECRET_FILE``, by default ``<state_dir>/secrets/key-issuer.key``):
its runtime signs its appends with a secret derived from the key, which the processor
derives from the key id and that secret, and nothing in the database gives.

    agentloom-keys create --space acme --kind host            # the agent runtime's key
    agentloom-keys create --space acme --kind user --actor alice
    agentloom-keys list [--space acme]
    agentloom-keys revoke KEY_ID
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import asyncpg
import typer

from domain.auth import KeyKind
from schemas.settings import Settings
from storage import api_keys
from storage.migrate import apply_dsn
from storage.roles import configured_dsn, dsn_of
from streams.kafka.bus_secrets import issuer_secret

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="API keys of AgentLoom Context: printed once, stored as sha256 (ALC_PG_DSN).",
)


@app.command()
def create(
    space: Annotated[str, typer.Option(help="the tenant space the key belongs to")],
    kind: Annotated[
        KeyKind, typer.Option(help="host: the runtime, acts for any actor of the space")
    ],
    actor: Annotated[str | None, typer.Option(help="the one actor of a user key")] = None,
    label: Annotated[str, typer.Option(help="a note for humans (who holds it)")] = "",
) -> None:
    """Create a key and print it once (stdout: the key alone; details on stderr)."""
    if (kind is KeyKind.USER) != (actor is not None):
        raise typer.BadParameter("--actor is required for a user key and refused for a host key")

    settings = Settings()
    issuer = issuer_secret(settings) if kind is KeyKind.HOST else None

    async def run() -> api_keys.IssuedKey:
        await apply_dsn(configured_dsn(settings))
        dsn = dsn_of(settings, "cli")
        return await api_keys.issue(dsn, space, kind, actor, label, issuer=issuer)

    issued = asyncio.run(run())
    who = f" for actor {issued.actor_id}" if issued.actor_id else ""
    typer.echo(f"created {issued.kind.value} key {issued.key_id} in space {space}{who}", err=True)
    typer.echo(issued.key)


@app.command("list")
def list_(space: Annotated[str | None, typer.Option(help="only this space")] = None) -> None:
    """Key ids, spaces, kinds and actors (never the keys)."""

    async def run() -> list[api_keys.KeyRecord]:
        conn = await asyncpg.connect(dsn_of(Settings(), "cli"))
        try:
            return await api_keys.list_keys(conn, space)
        finally:
            await conn.close()

    for k in asyncio.run(run()):
        state = "revoked" if k.revoked_at else "live"
        typer.echo(f"{k.key_id}  {k.space_id}  {k.kind}  {k.actor_id or '-'}  {state}  {k.label}")


@app.command()
def revoke(key_id: str) -> None:
    """Revoke a key; Prepare stops accepting it within its key cache's lifetime."""

    async def run() -> bool:
        conn = await asyncpg.connect(dsn_of(Settings(), "cli"))
        try:
            return await api_keys.revoke_key(conn, key_id)
        finally:
            await conn.close()

    if not asyncio.run(run()):
        typer.echo(f"no live key {key_id}", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {key_id}", err=True)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
