"""Fixtures shared by the framework-integration modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.integrations.connection import AgentLoomConnection
from tests.support.harness import connected
from tests.support.services import Services


@pytest.fixture(scope="module")
def connection(services: Services) -> Iterator[AgentLoomConnection]:
    """A framework connection to the test services, per module (``tests.support.harness``)."""
    with connected(services) as conn:
        yield conn
