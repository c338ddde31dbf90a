"""``drop_topics`` reads the broker's answer: a topic it refused to delete is an error
with its code, one it no longer has is what was asked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import pytest

from schemas.settings import Settings
from streams.kafka import provision
from streams.kafka.admin import BusAdminFailed


class _Admin:
    def __init__(self, existing: list[str], codes: dict[str, int]) -> None:
        self.existing, self.codes = existing, codes
        self.deleted: list[str] = []

    async def list_topics(self) -> list[str]:
        return self.existing

    async def delete_topics(self, topics: list[str]) -> Any:
        self.deleted = topics
        return SimpleNamespace(topic_error_codes=[(t, self.codes.get(t, 0)) for t in topics])


def _with(monkeypatch: pytest.MonkeyPatch, admin: _Admin) -> None:
    @asynccontextmanager
    async def fake(_: Settings) -> AsyncIterator[_Admin]:
        yield admin

    monkeypatch.setattr(provision, "_admin", fake)


async def test_a_topic_the_broker_would_not_delete_is_an_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = Settings(processor_id="px")
    admin = _Admin([s.topic_records, "px-__assignor-__leader", "other"], {s.topic_records: 41})
    _with(monkeypatch, admin)
    with pytest.raises(BusAdminFailed) as err:
        await provision.drop_topics(s)
    assert err.value.code == "bus_admin_failed"
    assert str(err.value) == f"the broker refused to delete topics: {s.topic_records}: error 41"
    assert admin.deleted == sorted([s.topic_records, "px-__assignor-__leader"])


async def test_a_topic_deleted_meanwhile_is_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Settings(processor_id="px")
    admin = _Admin([s.topic_records], {s.topic_records: 3})
    _with(monkeypatch, admin)
    await provision.drop_topics(s)
    assert admin.deleted == [s.topic_records]
