"""``agentloom``: the operator CLI. ``agentloom --help`` lists the command groups; every
command takes ``--help`` and ``--json``; exit codes 0 ok, 1 error, 2 usage/validation."""

from __future__ import annotations

import typer

from services import keys_cli
from services.cli import dlq_cmd, ops_cmd, policy_cmd, serve_cmd, session_cmd

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Operate AgentLoom Context (settings from ALC_* environment variables).",
)
app.add_typer(policy_cmd.app, name="policy")
app.add_typer(ops_cmd.topics, name="topics")
app.add_typer(dlq_cmd.app, name="dlq")
app.add_typer(session_cmd.app, name="session")
app.add_typer(keys_cli.app, name="keys")
app.command()(ops_cmd.migrate)
app.command(context_settings=serve_cmd.SETTINGS, add_help_option=False)(serve_cmd.serve)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
