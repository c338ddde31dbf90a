"""Issue 38, done when: "a hostile-tenant probe over the bus, HTTP and console finds
nothing". The probe (``devstack.hostile_probe``, ``make probe``) runs in-process against
the test services, the console and the analytics service: every probe ok, and the probes
cover each attack docs/security.md answers, on each of the three surfaces. Afterwards
nothing the probe made works: its keys answer 401, B's broker login is refused and B's
principal has no ACL or quota left."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from devstack.hostile_probe import probes
from devstack.launcher import Proc
from devstack.probe_world import ProbeResult, Target, World, provisioned, until
from services.prepare.bootstrap import Options
from streams.kafka.provision import remove_runtime, runtime_quotas
from streams.kafka.quotas import quotas_of
from tests.support.kafka import auth
from tests.support.services import Services, settings_of

pytestmark = [pytest.mark.integration, pytest.mark.spec("R3.3", "R15.4")]

# The attacks of the issue, by probe name (the probe may try more).
ATTACKS = {
    "bus": {
        "bus.scope_mismatch",  # B's key, A's session: dead letter under B
        "bus.attribution",  # ... counted in B's analytics, never in A's
        "bus.a_view_untouched",  # ... and nothing in A's records or summary
        "bus.key_mismatch",
        "bus.unsigned",
        "bus.wrong_signature",
        "bus.user_key_append",
        "bus.forged_compaction_outcome",
        "bus.foreign_blob_reference",
        "bus.acl_write_observability",
        "bus.acl_write_dead_letter",
        "bus.acl_read_records",
    },
    "http": {
        "http.every_route_probed",
        "http.get_session",
        "http.prepare",
        "http.read_record",
        "http.event_outcome",
        "http.diagnostics_call",
        "http.no_key",
        "http.malformed_key",
        "http.revoked_key",
        "http.taken_release_id",  # the one documented existence signal (409)
    },
    "console": {
        "console.session_of_a",
        "console.call_of_a",
        "console.record_of_a",
        "console.dry_run_of_a",
        "console.publish_without_csrf",
    },
}


async def test_a_hostile_tenant_finds_nothing_and_leaves_no_credential_behind(
    services: Services, console: str, analytics: Proc
) -> None:
    target = Target(settings_of(services.settings_env), services.prepare_url, console)
    heard: list[ProbeResult] = []
    async with provisioned(target) as world:
        results = await probes(world, heard.append)
    assert heard == results  # progress as it goes, one report per probe
    failed = [f"{r.name}: expected {r.expected!r}, observed {r.observed!r}" for r in results]
    failed = [f for f, r in zip(failed, results, strict=True) if not r.ok]
    assert not failed, "\n".join(failed)
    for surface, names in ATTACKS.items():
        probed = {r.name for r in results if r.surface == surface}
        assert names <= probed, (surface, sorted(names - probed))
    # The broker applies the removal of B's credential from its metadata log, after the
    # controller committed it: a login in the moment after may still pass.
    refused = until(lambda: _login(world), lambda got: got.startswith("refused"), 10)
    login, statuses = await asyncio.gather(refused, _calls_once_revoked(world))
    assert statuses == {"a host": 401, "b host": 401, "b user": 401}
    assert login.startswith("refused"), login
    principal = world.b.kafka.username or ""
    assert await remove_runtime(target.settings, principal) == 0  # no ACL of it left
    admin = AIOKafkaAdminClient(bootstrap_servers=target.settings.kafka_bootstrap, **auth())
    await admin.start()
    try:
        (quota,) = runtime_quotas(target.settings, (principal,))
        assert await quotas_of(admin, quota.user) == {}
    finally:
        await admin.close()


async def _calls_once_revoked(w: World) -> dict[str, int]:
    """Each key's answer on a route it could call during the run, asked until every one
    is refused or Prepare's key cache (which may still hold a key used just before the
    revocation) has certainly expired."""
    keys = {"a host": w.a.key, "b host": w.b.key, "b user": w.b.user_key}

    async def ask() -> dict[str, int]:
        out = {}
        for name, key in keys.items():
            async with w.http(key) as http:
                out[name] = (await http.get("/v1/analytics/rollups")).status_code
        return out

    return await until(ask, lambda got: set(got.values()) == {401}, Options().key_cache_s + 5)


async def _login(w: World) -> str:
    """B's broker login after the run: a producer with B's credentials starting."""
    p = AIOKafkaProducer(
        bootstrap_servers=w.target.settings.kafka_bootstrap,
        request_timeout_ms=5000,
        **w.b.kafka.client_kwargs(),
    )
    try:
        await p.start()
    except KafkaError as exc:
        return f"refused ({type(exc).__name__})"
    finally:
        await p.stop()
    return "logged in"
