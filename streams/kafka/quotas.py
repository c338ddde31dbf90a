"""Kafka client quotas (``domain.bus_access``), set and read as the operator's ``admin``:
AlterClientQuotas (KIP-546), which aiokafka's admin client does not have, sent as a
protocol request through its connection like ``streams.kafka.admin``'s; and
DescribeClientQuotas, which aiokafka defines."""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.admin import DescribeClientQuotasRequest
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Float64, Int16, Int32, Schema, String

from domain.bus_access import Quota
from streams.kafka.admin import BusAdminFailed

USER = "user"  # the quota entity type of a principal
_EXACT = 0  # DescribeClientQuotas match type: this entity name


_ENTITY = ("entity", Array(("entity_type", String("utf-8")), ("entity_name", String("utf-8"))))


class _AlterQuotasResponse(Response):  # type: ignore[misc]
    API_KEY = 49
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "entries",
            Array(
                ("error_code", Int16),
                ("error_message", String("utf-8")),
                (
                    "entity",
                    Array(("entity_type", String("utf-8")), ("entity_name", String("utf-8"))),
                ),
            ),
        ),
    )


class _AlterQuotasStruct(RequestStruct):  # type: ignore[misc]
    API_KEY = 49
    API_VERSION = 0
    RESPONSE_TYPE = _AlterQuotasResponse
    SCHEMA = Schema(
        (
            "entries",
            Array(
                (
                    "entity",
                    Array(("entity_type", String("utf-8")), ("entity_name", String("utf-8"))),
                ),
                (
                    "ops",
                    Array(("key", String("utf-8")), ("value", Float64), ("remove", Boolean)),
                ),
            ),
        ),
        ("validate_only", Boolean),
    )


class _AlterQuotas(Request[_AlterQuotasStruct]):  # type: ignore[misc]
    API_KEY = 49

    def __init__(self, quotas: Sequence[Quota], remove: bool = False) -> None:
        self.quotas, self.remove = quotas, remove

    def build(self, request_struct_class: type[_AlterQuotasStruct]) -> _AlterQuotasStruct:
        entries = [
            ([(USER, q.user)], [(k, v, self.remove) for k, v in sorted(q.values().items())])
            for q in self.quotas
        ]
        return request_struct_class(entries, False)


async def set_quotas(
    admin: AIOKafkaAdminClient, quotas: Sequence[Quota], remove: bool = False
) -> None:
    """Set each principal's quotas (idempotent: the same values again change nothing);
    with ``remove``, take those quotas off the principal instead."""
    if not quotas:
        return
    resp = await admin._send_to_controller(_AlterQuotas(quotas, remove))
    failed = {
        entity[0][1]: msg or str(code) for code, msg, entity in resp.entries if code and entity
    }
    if failed:
        raise BusAdminFailed(f"client quotas not set: {failed}", users=failed)


async def quotas_of(admin: AIOKafkaAdminClient, user: str) -> dict[str, float]:
    """The quotas the broker holds for principal ``user`` (empty: none)."""
    resp = await admin._send_to_controller(
        DescribeClientQuotasRequest([(USER, _EXACT, user)], True)
    )
    if resp.error_code:
        raise BusAdminFailed(f"client quotas not read: {resp.error_message or resp.error_code}")
    return {name: value for _, values in resp.entries for name, value in values}
