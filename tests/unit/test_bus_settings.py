"""The bus settings do what they say (issue 25): which principal a process connects as,
over which protocol, and which secrets each service signs with and the processor checks
with (each process only its own, re-read when a file changes); and how long a past
call's stored view is kept."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from domain.context.envelope import ServiceSigner
from schemas.settings import Settings
from services.prepare.bootstrap import Options
from streams.kafka.auth import BusConfigError, kafka_auth
from streams.kafka.bus_secrets import (
    SecretFile,
    issuer_secret,
    parse_keys,
    service_signer,
    verify_keys,
)

PREPARE, COMPACTION, ISSUER = "p" * 40, "c" * 40, "i" * 40


@pytest.fixture(autouse=True)
def _no_stack_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what each test gives: the test stack puts its own ALC_* in the environment."""
    for name in [k for k in os.environ if k.startswith("ALC_")]:
        monkeypatch.delenv(name)


def _state(tmp_path: Path) -> Path:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "kafka-users.env").write_text("processor=p-pw\nruntime=r-pw\n")
    (tmp_path / "secrets" / "bus-prepare.key").write_text(PREPARE + "\n")
    (tmp_path / "secrets" / "bus-compaction.key").write_text(COMPACTION + "\n")
    (tmp_path / "secrets" / "bus-verify.env").write_text(
        f"prepare={PREPARE}\ncompaction={COMPACTION}\n"
    )
    (tmp_path / "secrets" / "key-issuer.key").write_text(ISSUER + "\n")
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
def test_each_service_signs_with_its_own_key_and_the_processor_checks_both(
    tmp_path: Path,
) -> None:
    s = Settings(state_dir=str(_state(tmp_path)))
    prepare, compaction = service_signer(s, "prepare"), service_signer(s, "compaction")
    assert prepare.headers(b"k", b"v") == ServiceSigner("prepare", PREPARE.encode()).headers(
        b"k", b"v"
    )
    assert compaction.headers(b"k", b"v") == ServiceSigner(
        "compaction", COMPACTION.encode()
    ).headers(b"k", b"v")
    vk = verify_keys(s)()
    assert dict(vk.services) == {
        "prepare": (PREPARE.encode(),),
        "compaction": (COMPACTION.encode(),),
    }
    assert vk.issuers == (ISSUER.encode(),) and issuer_secret(s) == ISSUER.encode()
    given = Settings(bus_signing_key="t" * 40)  # type: ignore[arg-type]
    assert service_signer(given, "prepare").headers(b"k", b"v") != prepare.headers(b"k", b"v")
    with pytest.raises(BusConfigError):
        service_signer(Settings(bus_signing_key="short"), "prepare")  # type: ignore[arg-type]
    with pytest.raises(BusConfigError):
        service_signer(Settings(state_dir=str(tmp_path / "nowhere")), "compaction")
    with pytest.raises(BusConfigError):  # a verification key needs its service's name
        verify_keys(Settings(bus_verify_keys=PREPARE, key_issuer_secret=ISSUER))  # type: ignore[arg-type]


@pytest.mark.spec("R3.3")
def test_a_changed_secret_file_is_used_once_seen_and_a_broken_one_keeps_the_last(
    tmp_path: Path,
) -> None:
    now = [0.0]
    path = tmp_path / "bus-prepare.key"
    path.write_text("a" * 40 + "\n")
    source = SecretFile(path, parse_keys, every_s=1.0, clock=lambda: now[0])
    tmp = tmp_path / "new"
    tmp.write_text("b" * 40 + "\n" + "a" * 40 + "\n")
    tmp.rename(path)  # an atomic replace, as the runbook says
    assert source() == (b"a" * 40,)  # not looked at again within a second
    now[0] = 1.5
    assert source() == (b"b" * 40, b"a" * 40)
    path.write_text("short\n")
    now[0] = 3.0
    assert source() == (b"b" * 40, b"a" * 40)  # invalid: the last good value stays
    path.unlink()
    now[0] = 4.5
    assert source() == (b"b" * 40, b"a" * 40)


@pytest.mark.spec("R18")
def test_call_view_retention_is_its_own_bound() -> None:
    o = Options.from_settings(Settings(call_view_retention_h=2.0, prepared_retention_h=1.0))
    assert (o.call_view_retention_s, o.prepared_retention_s) == (7200.0, 3600.0)
