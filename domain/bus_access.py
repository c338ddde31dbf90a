"""Who may do what on the broker: the ACLs of each principal and the client quotas of
each runtime (docs/security.md) — pure.

Least privilege, by role:

- ``runtime``: writes the records topic, nothing else (its events are signed with its
  space's API key, which the processor checks: domain.context.envelope);
- ``processor``: reads the records topic in its group; writes committed records, dead
  letters, compaction requests and observability; owns faust's internal topics and its
  group (both named after the processor id);
- ``compaction``: reads compaction requests in its group; writes outcomes to the
  records topic, dead letters and observability;
- ``prepare``: writes run lifecycle events and budget observations to the records topic,
  and its notes to observability;
- ``analytics``: reads observability and dead letters in its group;
- ``cli``: reads dead letters (inspect, replay) and the records topic (a letter's
  original), writes the records topic (replay) and describes the groups.

Every service may describe, and create if missing, our topics (the start-up check,
``streams.kafka.topics``); a runtime may not. Only the operator's ``admin`` grants.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Resource(IntEnum):  # Kafka's ResourceType codes
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4


class Pattern(IntEnum):  # Kafka's PatternType codes
    LITERAL = 3
    PREFIXED = 4


class Op(IntEnum):  # Kafka's AclOperation codes
    READ = 3
    WRITE = 4
    CREATE = 5
    DESCRIBE = 8
    DESCRIBE_CONFIGS = 10


@dataclass(frozen=True, order=True)
class Acl:
    principal: str  # "User:<name>"
    resource: Resource
    name: str
    pattern: Pattern
    op: Op


@dataclass(frozen=True)
class BusNames:
    """The topic and group names of one deployment (``Settings``)."""

    records: str
    committed: str
    dead_letter: str
    compaction_requests: str
    observability: str
    processor_id: str
    compaction_group: str
    analytics_group: str


ROLES = ("processor", "compaction", "prepare", "analytics", "cli", "runtime")


def _topics(user: str, ops: tuple[Op, ...], *names: str) -> list[Acl]:
    return [Acl(f"User:{user}", Resource.TOPIC, n, Pattern.LITERAL, o) for n in names for o in ops]


def _group(user: str, name: str, pattern: Pattern = Pattern.LITERAL) -> list[Acl]:
    return [Acl(f"User:{user}", Resource.GROUP, name, pattern, o) for o in (Op.READ, Op.DESCRIBE)]


def acl_plan(n: BusNames, runtimes: tuple[str, ...] = ("runtime",)) -> list[Acl]:
    """Every ACL of the deployment, sorted; ``runtimes``: the runtime principals."""
    w, r = (Op.WRITE,), (Op.READ,)
    d = (Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.CREATE)  # the start-up check (streams.kafka.topics)
    every = (n.records, n.committed, n.dead_letter, n.compaction_requests, n.observability)
    out: list[Acl] = []
    out += _topics("processor", r, n.records)
    out += _topics("processor", w, n.committed, n.dead_letter, n.compaction_requests)
    out += _topics("processor", w, n.observability)
    out += _topics("processor", d, *every)
    out += _group("processor", n.processor_id)
    # faust's own topics (the assignor's leader topic) and group, all prefixed by its id
    faust_ops = (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS)
    out += [
        Acl("User:processor", Resource.TOPIC, f"{n.processor_id}-", Pattern.PREFIXED, o)
        for o in faust_ops
    ]
    out += _topics("compaction", r, n.compaction_requests)
    out += _topics("compaction", w, n.records, n.dead_letter, n.observability)
    out += _topics("compaction", d, *every)
    out += _group("compaction", n.compaction_group)
    out += _topics("prepare", w, n.records, n.observability)
    out += _topics("prepare", d, *every)
    out += _topics("analytics", r, n.observability, n.dead_letter)
    out += _topics("analytics", d, *every)
    out += _group("analytics", n.analytics_group)
    out += _topics("cli", r, n.dead_letter, n.records)  # a truncated letter's original
    out += _topics("cli", w, n.records)
    out += _topics("cli", d, *every)
    for g in (n.processor_id, n.compaction_group, n.analytics_group):
        out.append(Acl("User:cli", Resource.GROUP, g, Pattern.LITERAL, Op.DESCRIBE))
    for rt in runtimes:
        out += _topics(rt, (Op.WRITE, Op.DESCRIBE), n.records)
    return sorted(set(out))


# --- client quotas ------------------------------------------------------------------------
# Every runtime shares the records topic and its partitions with every other space's
# runtimes; one that floods it would slow them all. So each runtime principal gets Kafka
# client quotas: the bytes a second it may produce (``producer_byte_rate``) and the share
# of the broker's request and network threads its requests may take
# (``request_percentage``, 100 = one whole thread). A client over either is throttled by
# the broker — its requests delayed, never refused — so a flood costs its own runtime
# latency, not the other tenants'. Our services have no quota: they are the pipeline.

PRODUCER_BYTE_RATE = "producer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"


@dataclass(frozen=True, order=True)
class Quota:
    """One principal's client quotas, as Kafka names them (entity ``user``)."""

    user: str
    producer_byte_rate: int
    request_percentage: float

    def values(self) -> dict[str, float]:
        return {
            PRODUCER_BYTE_RATE: float(self.producer_byte_rate),
            REQUEST_PERCENTAGE: self.request_percentage,
        }


def quota_plan(
    runtimes: tuple[str, ...], producer_byte_rate: int, request_percentage: float
) -> tuple[Quota, ...]:
    """The quotas of each runtime principal (all alike)."""
    if producer_byte_rate <= 0 or request_percentage <= 0:
        raise ValueError("runtime quotas must be positive")
    return tuple(Quota(r, producer_byte_rate, request_percentage) for r in sorted(set(runtimes)))
