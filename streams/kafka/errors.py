"""What an aiokafka error means to us: the translation table from the broker client's
exceptions to ours (``schemas/errors.py``), applied by ``streams.faults``."""

from __future__ import annotations

from aiokafka.errors import (
    BrokerNotAvailableError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    KafkaUnavailableError,
)

from schemas.errors import BusRejected, BusUnavailable, ContextError

DRIVER_ERRORS: tuple[type[Exception], ...] = (KafkaError,)

# Unreachable brokers that aiokafka does not flag ``retriable``.
_UNREACHABLE = (
    KafkaConnectionError,
    KafkaTimeoutError,
    BrokerNotAvailableError,
    KafkaUnavailableError,
)


def _name(exc: KafkaError) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # a BrokerResponseError made without its errno cannot print itself
        return type(exc).__name__


def kafka_error(exc: BaseException) -> ContextError | None:
    """Our error for an aiokafka error; None for anything else. Transient when aiokafka
    flags it ``retriable`` (a leader moving, a coordinator loading, a timed-out request)
    or the broker is out of reach; any other (a record too large, an authorization the
    broker refuses, a closed producer) is rejected."""
    if not isinstance(exc, KafkaError):
        return None
    name = _name(exc)
    if exc.retriable or isinstance(exc, _UNREACHABLE):
        return BusUnavailable(f"broker unavailable: {name}")
    return BusRejected(f"broker refused: {name}")
