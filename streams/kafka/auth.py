"""How each of our processes authenticates to the broker (docs/security.md); the secrets
it signs with are in ``streams.kafka.bus_secrets``.

One principal per role: ``processor``, ``compaction``, ``prepare``, ``analytics``,
``cli``, ``runtime`` (and ``admin``, the operator's super user that provisions users,
topics and ACLs: ``streams.kafka.provision``). A deployment names the principal
(``ALC_KAFKA_USERNAME`` / ``ALC_KAFKA_PASSWORD``); the local stack leaves it unset, and
each process takes the principal of its role from ``<state_dir>/secrets/kafka-users.env``
(written by ``deploy/kafka.sh``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiokafka.helpers import create_ssl_context

from schemas.errors import ContextError
from schemas.settings import Settings

Role = Literal["processor", "compaction", "prepare", "analytics", "cli", "runtime", "admin"]


class BusConfigError(ContextError):
    """The broker credentials or a bus secret cannot be had."""

    code = "bus_config"
    retriable = False
    http_status = 500


def secrets_dir(settings: Settings) -> Path:
    return Path(settings.state_dir) / "secrets"


def credentials_path(settings: Settings) -> Path:
    return Path(settings.kafka_credentials_file or secrets_dir(settings) / "kafka-users.env")


def read_credentials(path: Path) -> dict[str, str]:
    """``name=password`` lines; blank lines and ``#`` comments are skipped."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            name, _, password = line.partition("=")
            out[name.strip()] = password.strip()
    return out


@dataclass(frozen=True)
class KafkaAuth:
    """A principal's broker login; the password is kept out of the repr (a log line or
    a traceback that shows the object shows no secret)."""

    protocol: str
    mechanism: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    cafile: str | None = None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL")

    def client_kwargs(self) -> dict[str, Any]:
        """aiokafka's producer, consumer and admin client keyword arguments."""
        kw: dict[str, Any] = {"security_protocol": self.protocol}
        if self.sasl:
            kw |= {
                "sasl_mechanism": self.mechanism,
                "sasl_plain_username": self.username,
                "sasl_plain_password": self.password,
            }
        if self.protocol.endswith("SSL"):
            kw["ssl_context"] = create_ssl_context(cafile=self.cafile)
        return kw

    def faust_credentials(self) -> Any:  # faust's Credentials: untyped
        import faust

        if not self.sasl:
            return None
        ssl = create_ssl_context(cafile=self.cafile) if self.protocol.endswith("SSL") else None
        return faust.SASLCredentials(
            username=self.username,
            password=self.password,
            ssl_context=ssl,
            mechanism=self.mechanism,
        )


def kafka_auth(settings: Settings, role: Role) -> KafkaAuth:
    """The credentials of this process: the named principal, else the role's principal
    from the credentials file. A SASL protocol without either is a configuration error
    at start, not a connection that the broker refuses later."""
    protocol, mech = settings.kafka_security_protocol, settings.kafka_sasl_mechanism
    cafile = settings.kafka_ssl_cafile or _default_ca(settings, protocol)
    if protocol == "PLAINTEXT":
        return KafkaAuth(protocol, mech, cafile=cafile)
    if settings.kafka_username is not None:
        password = settings.kafka_password.get_secret_value() if settings.kafka_password else ""
        return KafkaAuth(protocol, mech, settings.kafka_username, password, cafile)
    path = credentials_path(settings)
    try:
        users = read_credentials(path)
    except OSError as exc:
        raise BusConfigError(
            f"no Kafka credentials: set ALC_KAFKA_USERNAME/ALC_KAFKA_PASSWORD, or"
            f" ALC_KAFKA_CREDENTIALS_FILE (cannot read {path}: {exc.strerror})",
            path=str(path),
        ) from exc
    if role not in users:
        raise BusConfigError(f"{path} has no principal '{role}'", path=str(path), role=role)
    return KafkaAuth(protocol, mech, role, users[role], cafile)


def _default_ca(settings: Settings, protocol: str) -> str | None:
    ca = secrets_dir(settings) / "tls" / "ca.pem"
    return str(ca) if protocol == "SASL_SSL" and ca.exists() else None
