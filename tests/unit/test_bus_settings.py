"""The bus settings do what they say (issue 25): which principal a process connects as,
over which protocol, and which secret the services sign with; and how long a past
call's stored view is kept."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from domain.context.envelope import ServiceSigner
from schemas.settings import Settings
from services.prepare.bootstrap import Options
from streams.kafka.auth import BusConfigError, kafka_auth, service_root

SECRET = "s" * 40


@pytest.fixture(autouse=True)
def _no_stack_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what each test gives: the test stack puts its own ALC_* in the environment."""
    for name in [k for k in os.environ if k.startswith("ALC_")]:
        monkeypatch.delenv(name)


def _state(tmp_path: Path) -> Path:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "kafka-users.env").write_text("processor=p-pw\nruntime=r-pw\n")
    (tmp_path / "secrets" / "bus-service.key").write_text(SECRET + "\n")
    return tmp_path


@pytest.mark.spec("R3.3")
def test_each_role_connects_as_its_own_principal_from_the_credentials_file(
    tmp_path: Path,
) -> None:
    s = Settings(state_dir=str(_state(tmp_path)))
    kw = kafka_auth(s, "processor").client_kwargs()
    assert (kw["sasl_plain_username"], kw["sasl_plain_password"]) == ("processor", "p-pw")
    assert kw["security_protocol"] == "SASL_PLAINTEXT" and kw["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kafka_auth(s, "runtime").username == "runtime"
    with pytest.raises(BusConfigError):  # a role the file has no principal for
        kafka_auth(s, "analytics")
    other = tmp_path / "other.env"
    other.write_text("processor=elsewhere\n")
    moved = Settings(state_dir=str(tmp_path), kafka_credentials_file=str(other))
    assert kafka_auth(moved, "processor").password == "elsewhere"


@pytest.mark.spec("R3.3")
def test_a_named_principal_wins_and_plaintext_sends_no_credentials(tmp_path: Path) -> None:
    s = Settings(
        state_dir=str(_state(tmp_path)),
        kafka_username="rt-b",
        kafka_password="b-pw",  # type: ignore[arg-type]
        kafka_sasl_mechanism="SCRAM-SHA-256",
    )
    kw = kafka_auth(s, "runtime").client_kwargs()
    assert (kw["sasl_plain_username"], kw["sasl_plain_password"]) == ("rt-b", "b-pw")
    assert kw["sasl_mechanism"] == "SCRAM-SHA-256"
    plain = kafka_auth(Settings(kafka_security_protocol="PLAINTEXT"), "runtime").client_kwargs()
    assert plain == {"security_protocol": "PLAINTEXT"}
    tls = kafka_auth(s.model_copy(update={"kafka_security_protocol": "SASL_SSL"}), "runtime")
    assert tls.client_kwargs()["ssl_context"] is not None


@pytest.mark.spec("R3.3")
def test_the_service_secret_decides_the_services_signatures(tmp_path: Path) -> None:
    from_file = service_root(Settings(state_dir=str(_state(tmp_path))))
    assert from_file == SECRET.encode()
    given = service_root(Settings(bus_service_secret="t" * 40))  # type: ignore[arg-type]
    sign = [ServiceSigner.of("compaction", r).headers(b"k", b"v") for r in (from_file, given)]
    assert sign[0] != sign[1]  # another secret, another signature
    with pytest.raises(BusConfigError):
        service_root(Settings(bus_service_secret="short"))  # type: ignore[arg-type]
    with pytest.raises(BusConfigError):
        service_root(Settings(state_dir=str(tmp_path / "nowhere")))


@pytest.mark.spec("R18")
def test_call_view_retention_is_its_own_bound() -> None:
    o = Options.from_settings(Settings(call_view_retention_h=2.0, prepared_retention_h=1.0))
    assert (o.call_view_retention_s, o.prepared_retention_s) == (7200.0, 3600.0)
