"""The operator's broker calls that aiokafka's admin client does not have: SCRAM users
(AlterUserScramCredentials, KIP-554) and ACLs (CreateAcls, DescribeAcls), sent as Kafka
protocol requests through its connection. Used by ``streams.kafka.provision`` as
``admin``."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import Sequence

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.admin import (
    CreateAclsRequest_v1,
    DeleteAclsRequest_v1,
    DescribeAclsRequest,
)
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    CompactArray,
    CompactBytes,
    CompactString,
    Int8,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

from domain.bus_access import Acl
from schemas.errors import ContextError

SCRAM_SHA_512 = 2  # Kafka's ScramMechanism code
SCRAM_ITERATIONS = 8192  # Kafka's minimum is 4096
_ANY_HOST = "*"
_ALLOW = 3
_ANY = 1  # as a DeleteAcls filter: any resource type, pattern, operation or permission
_NO_CREDENTIAL = 91  # RESOURCE_NOT_FOUND: a SCRAM credential to delete that is not there


class BusAdminFailed(ContextError):
    code = "bus_admin_failed"
    retriable = True
    http_status = 503


class _ScramResponse(Response):  # type: ignore[misc]
    API_KEY = 51
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "results",
            CompactArray(
                ("user", CompactString("utf-8")),
                ("error_code", Int16),
                ("error_message", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _ScramStruct(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 51
    API_VERSION = 0
    RESPONSE_TYPE = _ScramResponse
    SCHEMA = Schema(
        (
            "deletions",
            CompactArray(
                ("name", CompactString("utf-8")), ("mechanism", Int8), ("tags", TaggedFields)
            ),
        ),
        (
            "upsertions",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("mechanism", Int8),
                ("iterations", Int32),
                ("salt", CompactBytes),
                ("salted_password", CompactBytes),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _UpsertScram(Request[_ScramStruct]):  # type: ignore[misc]
    API_KEY = 51

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users

    def build(self, request_struct_class: type[_ScramStruct]) -> _ScramStruct:
        rows: list[tuple[object, ...]] = []
        for name, password in sorted(self.users.items()):
            salt = secrets.token_bytes(32)
            salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, SCRAM_ITERATIONS)
            rows.append((name, SCRAM_SHA_512, SCRAM_ITERATIONS, salt, salted, {}))
        return request_struct_class([], rows, {})


class _CreateAcls(Request[CreateAclsRequest_v1]):  # type: ignore[misc]
    API_KEY = 30

    def __init__(self, acls: Sequence[Acl]) -> None:
        self.acls = acls

    def build(self, request_struct_class: type[CreateAclsRequest_v1]) -> CreateAclsRequest_v1:
        return request_struct_class(
            [
                (a.resource, a.name, a.pattern, a.principal, _ANY_HOST, a.op, _ALLOW)
                for a in self.acls
            ]
        )


class _DeleteScram(Request[_ScramStruct]):  # type: ignore[misc]
    API_KEY = 51

    def __init__(self, users: Sequence[str]) -> None:
        self.users = users

    def build(self, request_struct_class: type[_ScramStruct]) -> _ScramStruct:
        return request_struct_class([(n, SCRAM_SHA_512, {}) for n in sorted(self.users)], [], {})


class _DeleteAcls(Request[DeleteAclsRequest_v1]):  # type: ignore[misc]
    API_KEY = 31

    def __init__(self, principal: str) -> None:
        self.principal = principal

    def build(self, request_struct_class: type[DeleteAclsRequest_v1]) -> DeleteAclsRequest_v1:
        # a null name and host match any: every ACL of the principal
        return request_struct_class([(_ANY, None, _ANY, self.principal, None, _ANY, _ANY)])


async def upsert_scram_users(admin: AIOKafkaAdminClient, users: dict[str, str]) -> None:
    """Set each user's SCRAM-SHA-512 password (created if new)."""
    if not users:
        return
    resp = await admin._send_to_controller(_UpsertScram(users))
    failed = {u: msg or str(code) for u, code, msg, _ in resp.results if code}
    if failed:
        raise BusAdminFailed(f"SCRAM users not set: {failed}", users=failed)


async def create_acls(admin: AIOKafkaAdminClient, acls: Sequence[Acl]) -> None:
    """Create ACLs (creating an existing one is a no-op on the broker)."""
    for start in range(0, len(acls), 200):
        chunk = acls[start : start + 200]
        resp = await admin._send_to_controller(_CreateAcls(chunk))
        failed = [
            f"{a.principal} {a.op.name} {a.name}: {msg or code}"
            for a, (code, msg) in zip(chunk, resp.creation_responses, strict=True)
            if code
        ]
        if failed:
            raise BusAdminFailed(f"ACLs not created: {failed[:5]}", failed=len(failed))


async def delete_scram_users(admin: AIOKafkaAdminClient, users: Sequence[str]) -> None:
    """Delete each user's SCRAM-SHA-512 credential: the broker refuses its logins from
    then on. A user without one is no failure (deleting twice is deleting once)."""
    if not users:
        return
    resp = await admin._send_to_controller(_DeleteScram(users))
    failed = {
        u: msg or str(code) for u, code, msg, _ in resp.results if code not in (0, _NO_CREDENTIAL)
    }
    if failed:
        raise BusAdminFailed(f"SCRAM users not deleted: {failed}", users=failed)


async def delete_acls(admin: AIOKafkaAdminClient, principal: str) -> int:
    """Delete every ACL of ``principal`` (``User:<name>``); how many there were."""
    resp = await admin._send_to_controller(_DeleteAcls(principal))
    (code, msg, matching) = resp.filter_responses[0]
    failed = [m for m in matching if m[0]]
    if code or failed:
        raise BusAdminFailed(f"ACLs of {principal} not deleted: {msg or code or failed[:5]}")
    return len(matching)


async def wait_enforced(admin: AIOKafkaAdminClient, acl: Acl, timeout_s: float = 30.0) -> None:
    """Until every broker enforces ``acl``. CreateAcls answers once the controller has
    committed the records; each broker applies them from its metadata log afterwards,
    behind whatever else the log holds (other clients' topic creations, under load), and
    until then refuses what they allow. A broker applies the log in order, so the last
    ACL of a request stands for all of it. Asked by DescribeAcls, which a broker answers
    from the ACLs it enforces."""
    ask = DescribeAclsRequest(acl.resource, acl.name, acl.pattern, acl.principal, _ANY_HOST,
                              acl.op, _ALLOW)  # fmt: skip
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    for broker in sorted(admin._client.cluster.brokers(), key=lambda b: b.nodeId):
        while True:
            resp = await admin._send_request_to_node(broker.nodeId, ask)
            if resp.error_code:
                raise BusAdminFailed(f"ACLs not described: {resp.error_message or resp.error_code}")
            if resp.resources:
                break
            if loop.time() >= deadline:
                raise BusAdminFailed(
                    f"broker {broker.nodeId} does not enforce the new ACLs after {timeout_s:g} s",
                    broker=broker.nodeId,
                )
            await asyncio.sleep(0.05)
