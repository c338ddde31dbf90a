"""Issue 38 (item 5): every runtime principal is held to client quotas — the bytes a
second it may produce and the share of the broker's threads its requests may take — in
deploy/k8s exactly as the local provisioning sets them (``domain.bus_access``), and our
services have none (they are the pipeline)."""

from __future__ import annotations

import pytest

from domain.bus_access import PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, ROLES, Quota, quota_plan
from streams.kafka.provision import runtime_quotas
from tests.unit.k8s_checks import Doc, manifests, named, settings_of
from tests.unit.test_k8s_bus_acls import RUNTIMES

pytestmark = pytest.mark.spec("R3.3")

# Strimzi's names (KafkaUser spec.quotas) for Kafka's.
STRIMZI = {"producerByteRate": PRODUCER_BYTE_RATE, "requestPercentage": REQUEST_PERCENTAGE}


def quotas_of(user: Doc) -> dict[str, float]:
    return {STRIMZI[k]: float(v) for k, v in (user["spec"].get("quotas") or {}).items()}


def test_each_runtime_kafka_user_has_the_runtime_quotas() -> None:
    docs = manifests()
    users = named(docs, "KafkaUser")
    for q in runtime_quotas(settings_of(docs), RUNTIMES):
        assert quotas_of(users[q.user]) == q.values(), q.user


def test_our_services_have_no_quota() -> None:
    users = named(manifests(), "KafkaUser")
    assert [r for r in ROLES if r != "runtime" and quotas_of(users[r])] == []


def test_the_plan_gives_every_runtime_the_same_positive_quotas() -> None:
    plan = quota_plan(("rt-b", "runtime", "rt-b"), 1 << 20, 25.0)
    assert plan == (Quota("rt-b", 1 << 20, 25.0), Quota("runtime", 1 << 20, 25.0))
    assert plan[0].values() == {PRODUCER_BYTE_RATE: 1048576.0, REQUEST_PERCENTAGE: 25.0}
    with pytest.raises(ValueError):
        quota_plan(("runtime",), 0, 25.0)


def test_the_runtime_quota_settings_are_what_provisioning_sets() -> None:
    """``ALC_RUNTIME_PRODUCER_BYTE_RATE`` / ``ALC_RUNTIME_REQUEST_PERCENTAGE`` are the
    quotas ``streams.kafka.provision`` sets on every runtime principal (the real stack
    reads them back from the broker, tests/integration/test_bus_auth.py)."""
    from schemas.settings import Settings

    s = Settings(runtime_producer_byte_rate=1_234_567, runtime_request_percentage=12.5)
    quotas = runtime_quotas(s, ("runtime", "agent-b"))
    assert [q.user for q in quotas] == ["agent-b", "runtime"]
    assert {(q.producer_byte_rate, q.request_percentage) for q in quotas} == {(1_234_567, 12.5)}
    with pytest.raises(ValueError):
        runtime_quotas(Settings(runtime_request_percentage=0), ("runtime",))
