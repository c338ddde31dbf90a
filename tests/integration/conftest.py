"""Fixtures shared by the integration modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devstack.launcher import Proc
from tests.support.console import running_console
from tests.support.harness import analytics_process
from tests.support.model_server import Script
from tests.support.services import Services, drop_made_topics, scripted_services
from tests.support.stack import Stack


@pytest.fixture(scope="module")
def console(services: Services) -> Iterator[str]:
    """The web console (``python -m services.console``) on the test services, per module;
    a module that needs other console settings defines its own."""
    with running_console(services) as url:
        yield url


@pytest.fixture(scope="module")
def scripted(stack: Stack, pg_dsn: str) -> Iterator[tuple[Services, Script]]:
    """Our services with the OpenAI-compatible summarizer pointed at a scripted model
    server, per module (``tests.support.services.scripted_services``)."""
    with scripted_services(stack, pg_dsn, ALC_COMPACTION_WAIT_S="20") as (svc, script):
        yield svc, script


@pytest.fixture(scope="module")
def analytics(services: Services) -> Iterator[Proc]:
    """The analytics service (``python -m services.analytics``) beside the test services,
    in a consumer group of its own, per module (``tests.support.harness``)."""
    with analytics_process(services) as proc:
        yield proc


@pytest.fixture(scope="session", autouse=True)
def _tests_topics_deleted() -> Iterator[None]:
    """Every topic the session's tests made is deleted at its end (``made``)."""
    yield
    drop_made_topics()
