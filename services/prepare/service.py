"""The Prepare service's use cases, as ``bootstrap`` wires them (to real adapters or to
fakes) and the HTTP routes call them: releases (``publishing``), sessions and runs
(``run_lifecycle``), prepare (``prepare_context`` with ``compaction_check``), the model
gateway (``model_gateway``), read-back and grants (``readback``), keys and permissions
(``access``) and the content store (``content``).
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from services.prepare.access import Access
from services.prepare.assembly.prepare_context import Preparer
from services.prepare.content import ContentStore
from services.prepare.model_gateway import Gateway
from services.prepare.publishing import ReleaseBook
from services.prepare.readback import ReadBack
from services.prepare.run_lifecycle import Runs


@dataclass
class PrepareService:
    """One field per use case; the routes call them directly."""

    releases: ReleaseBook
    runs: Runs
    preparer: Preparer
    gateway: Gateway
    readback: ReadBack
    access: Access
    content: ContentStore
    pool: asyncpg.Pool | None = None  # for the analytics query (None in unit tests)
