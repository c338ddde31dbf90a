"""TLS on the bus by a switch (issue 25): ``ALC_KAFKA_TLS=1 deploy/kafka.sh up`` starts a
broker whose client listener is SASL_SSL (a self-signed certificate for 127.0.0.1 that
clients trust through ``<state>/secrets/tls/ca.pem``), with the same principals and ACLs."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from schemas.settings import Settings
from streams.kafka.auth import kafka_auth
from streams.kafka.provision import ensure_bus
from tests.support.services import free_port
from tests.support.stack import REPO


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    state = tmp_path_factory.mktemp("tls-stack")
    env = {
        **os.environ,
        "ALC_STATE_DIR": str(state),
        "ALC_KAFKA_PORT": str(free_port()),
        "ALC_KAFKA_CONTROLLER_PORT": str(free_port()),
        "ALC_KAFKA_TLS": "1",
    }
    script = str(REPO / "deploy" / "kafka.sh")
    up = subprocess.run(
        ["bash", script, "up"], env=env, capture_output=True, text=True, timeout=300
    )
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    try:
        yield {
            "kafka_bootstrap": f"127.0.0.1:{env['ALC_KAFKA_PORT']}",
            "kafka_security_protocol": "SASL_SSL",
            "state_dir": str(state),
            # Its own secrets, not the test stack's (in this process's environment).
            "kafka_credentials_file": str(state / "secrets" / "kafka-users.env"),
            "kafka_ssl_cafile": str(state / "secrets" / "tls" / "ca.pem"),
        }
    finally:
        subprocess.run(["bash", script, "down"], env=env, capture_output=True, timeout=120)


@pytest.mark.spec("R3.3")
async def test_the_tls_switch_serves_sasl_ssl_with_the_same_acls(
    tls_broker: dict[str, str],
) -> None:
    s = Settings(**tls_broker, topic_partitions=1)  # type: ignore[arg-type]
    assert Path(s.state_dir, "secrets", "tls", "ca.pem").exists()
    await ensure_bus(s)
    runtime = kafka_auth(s, "runtime").client_kwargs()
    assert runtime["security_protocol"] == "SASL_SSL" and runtime["ssl_context"] is not None
    producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, **runtime)
    await producer.start()
    try:
        md = await producer.send_and_wait(s.topic_records, b"over tls", key=b"k")
        assert md.offset >= 0
        with pytest.raises(KafkaError):  # the same ACLs: a runtime writes records only
            await producer.send_and_wait(s.topic_committed, b"x", key=b"k")
    finally:
        await producer.stop()
    plain = kafka_auth(
        s.model_copy(update={"kafka_security_protocol": "SASL_PLAINTEXT"}), "runtime"
    )
    cleartext = AIOKafkaProducer(
        bootstrap_servers=s.kafka_bootstrap, request_timeout_ms=4000, **plain.client_kwargs()
    )
    with pytest.raises(KafkaError):  # no cleartext connection to a TLS listener
        await cleartext.start()
    await cleartext.stop()
