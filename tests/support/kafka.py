"""Raw Kafka clients for tests that inject or read messages themselves: the broker's
credentials for a role (streams.kafka.auth), and the envelope a message needs for the
processor to look at it at all (domain.context.envelope)."""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer

from domain.context.envelope import Headers
from schemas.settings import Settings
from services.bus import signer_for
from streams.kafka.auth import Role, kafka_auth
from streams.kafka.bus_secrets import SigningService, service_signer


def auth(role: Role = "admin") -> dict[str, Any]:
    """aiokafka keyword arguments for ``role``'s principal of the test stack (the
    ``stack`` fixture puts its authentication settings in this process's environment)."""
    return kafka_auth(Settings(), role).client_kwargs()


def signed(api_key: str, key: bytes | None, value: bytes) -> Headers:
    """The envelope of a runtime holding ``api_key``."""
    signer = signer_for(api_key)
    assert signer is not None, "not an API key"
    return signer.headers(key, value)


def service_signed(service: SigningService, key: bytes | None, value: bytes) -> Headers:
    """The envelope of one of our services (``prepare``, ``compaction``), signed with the
    key that service reads."""
    return service_signer(Settings(), service).headers(key, value)


def reader(bootstrap: str, topic: str, **extra: Any) -> AIOKafkaConsumer:
    """A consumer of ``topic`` from its start, as admin and outside any group (``extra``:
    more of aiokafka's settings)."""
    return AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        **auth(),
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **extra,
    )
