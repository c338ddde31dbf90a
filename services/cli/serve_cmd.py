"""``agentloom serve``: the local stack and every service in the foreground, until Ctrl-C.

The work is ``devstack.serve`` (``python -m devstack.serve``, with the launcher the demo
and the tests use). The dev tools sit above the product's packages, which never import
them, so this command replaces its own process with that module's, passing every
argument on (``agentloom serve --help`` lists its options): same pid, same signals, same
exit code.
"""

from __future__ import annotations

import os
import sys

import typer


def serve(ctx: typer.Context) -> None:
    """Run Kafka, PostgreSQL and every service (Prepare, processor, compaction, analytics,
    console) in the foreground, print the URLs and a dev host key; Ctrl-C stops them."""
    os.execv(sys.executable, [sys.executable, "-m", "devstack.serve", *ctx.args])


SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
