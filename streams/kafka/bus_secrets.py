"""The bus's secrets, each process only its own (docs/security.md, domain.context.envelope).

- Prepare and the compaction service each sign with their **own** signing key: the
  operator generates one per service (``deploy/kafka.sh``, the k8s Secrets); no service
  holds another's, and none is derived from a shared root.
- The processor holds the **verification keys**: every key it accepts per service
  (``service=key`` lines; two for a service during a rotation), and the **key issuer
  secret**(s) from which it derives each host key's signing secret.
- The key-issuing tool (``agentloom-keys``, the dev and test harnesses) holds the key
  issuer secret, and issues host keys under its first (current) line.

Each secret is given by an ``ALC_*`` variable or a file (by default in
``bus_secrets_dir``, ``<state_dir>/secrets``). A file is re-read when it changes —
looked at no more than once per ``bus_secrets_reload_s`` — so a rotation takes effect
without a restart; a file that becomes unreadable or invalid keeps the last good value (and logs
why) rather than stopping the bus.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, Literal, TypeVar

from domain.context.envelope import Headers, ServiceSigner, VerifyKeys
from schemas.settings import Settings
from streams.kafka.auth import BusConfigError, secrets_dir

log = logging.getLogger("agentloom.bus_secrets")

MIN_CHARS = 32
SigningService = Literal["prepare", "compaction"]
T = TypeVar("T")


def _lines(text: str) -> list[str]:
    """Non-blank lines; commas separate too (one env variable); ``#`` comments skipped."""
    out = [p.strip() for line in text.splitlines() for p in line.split(",")]
    return [p for p in out if p and not p.startswith("#")]


def _secret(value: str, what: str) -> bytes:
    if len(value) < MIN_CHARS:
        raise BusConfigError(f"{what} must have at least {MIN_CHARS} characters")
    return value.encode()


def parse_keys(text: str, what: str = "a bus secret") -> tuple[bytes, ...]:
    """One secret per line, the current one first."""
    keys = tuple(_secret(v, what) for v in _lines(text))
    if not keys:
        raise BusConfigError(f"no {what}")
    return keys


def parse_verify_keys(text: str) -> dict[str, tuple[bytes, ...]]:
    """``service=key`` lines; a service named twice has two keys (a rotation)."""
    out: dict[str, tuple[bytes, ...]] = {}
    for line in _lines(text):
        name, sep, value = line.partition("=")
        if not sep:
            raise BusConfigError("a verification key is a 'service=key' line")
        key = _secret(value.strip(), f"the verification key of {name.strip()}")
        out[name.strip()] = (*out.get(name.strip(), ()), key)
    return out


class SecretFile(Generic[T]):
    """A secret file's parsed value, read again when the file changes (its modification
    time, size or inode: an atomic rename, or a Kubernetes Secret volume's update)."""

    def __init__(
        self,
        path: Path,
        parse: Callable[[str], T],
        every_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path, self.parse, self.every_s, self.clock = path, parse, every_s, clock
        try:
            self._stamp = self._stat()
            self._value = parse(path.read_text())
        except OSError as exc:
            raise BusConfigError(f"cannot read {path}: {exc.strerror}", path=str(path)) from exc
        self._next = clock() + every_s

    def _stat(self) -> tuple[int, int, int]:
        st = self.path.stat()
        return st.st_mtime_ns, st.st_size, st.st_ino

    def __call__(self) -> T:
        now = self.clock()
        if now < self._next:
            return self._value
        self._next = now + self.every_s
        try:
            stamp = self._stat()
            if stamp != self._stamp:
                self._value, self._stamp = self.parse(self.path.read_text()), stamp
                log.warning("bus secrets: %s changed; now in use", self.path)
        except (OSError, BusConfigError) as exc:
            log.error("bus secrets: keeping the last good %s (%s)", self.path, exc)
        return self._value


def _source(
    settings: Settings,
    value: object,
    file: str | None,
    default: str,
    parse: Callable[[str], T],
) -> Callable[[], T]:
    """The parsed secret of an ``ALC_*`` variable (fixed), else of its file (reloaded)."""
    if value is not None:
        parsed = parse(value.get_secret_value())  # type: ignore[attr-defined]
        return lambda: parsed
    base = Path(settings.bus_secrets_dir) if settings.bus_secrets_dir else secrets_dir(settings)
    path = Path(file) if file else base / default
    return SecretFile(path, parse, every_s=settings.bus_secrets_reload_s)


class ReloadingSigner:
    """A service's ``Signer`` whose key comes from a source that may change (rotation)."""

    def __init__(self, service: SigningService, key: Callable[[], tuple[bytes, ...]]) -> None:
        self.service, self.key = service, key
        self._signer = ServiceSigner(service, key()[0])

    def headers(self, key: bytes | None, value: bytes) -> Headers:
        secret = self.key()[0]
        if secret != self._signer.secret:
            self._signer = ServiceSigner(self.service, secret)
        return self._signer.headers(key, value)


def service_signer(settings: Settings, service: SigningService) -> ReloadingSigner:
    """``service``'s envelope signer: ``ALC_BUS_SIGNING_KEY``, else
    ``ALC_BUS_SIGNING_KEY_FILE``, else ``bus-<service>.key`` in the secrets directory."""
    what = f"the signing key of {service}"
    key = _source(
        settings,
        settings.bus_signing_key,
        settings.bus_signing_key_file,
        f"bus-{service}.key",
        lambda text: parse_keys(text, what),
    )
    return ReloadingSigner(service, key)


def issuer_secrets(settings: Settings) -> Callable[[], tuple[bytes, ...]]:
    """The key issuer secret(s), the current one first (``key-issuer.key``)."""
    return _source(
        settings,
        settings.key_issuer_secret,
        settings.key_issuer_secret_file,
        "key-issuer.key",
        lambda text: parse_keys(text, "the key issuer secret"),
    )


def issuer_secret(settings: Settings) -> bytes:
    """The secret new host keys are issued under (``agentloom-keys``)."""
    return issuer_secrets(settings)()[0]


def verify_keys(settings: Settings) -> Callable[[], VerifyKeys]:
    """The processor's verification keys; the same ``VerifyKeys`` object until a file
    changes."""
    services = _source(
        settings,
        settings.bus_verify_keys,
        settings.bus_verify_keys_file,
        "bus-verify.env",
        parse_verify_keys,
    )
    issuers = issuer_secrets(settings)
    current = VerifyKeys(services(), issuers())

    def now() -> VerifyKeys:
        nonlocal current
        s, i = services(), issuers()
        if s is not current.services or i is not current.issuers:
            current = VerifyKeys(s, i)
        return current

    return now
