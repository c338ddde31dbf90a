"""Issue 38, done when: "a hostile-tenant probe over the bus, HTTP and console finds
nothing". The probe (``devstack.hostile_probe``, ``make probe``) runs in-process against
the test services, the console and the analytics service: every probe ok, and the probes
cover each attack docs/security.md answers, on each of the three surfaces."""

from __future__ import annotations

import pytest

from devstack.hostile_probe import run_probe
from devstack.launcher import Proc
from devstack.probe_world import ProbeResult, Target
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


async def test_a_hostile_tenant_finds_nothing_on_the_bus_http_or_console(
    services: Services, console: str, analytics: Proc
) -> None:
    target = Target(settings_of(services.settings_env), services.prepare_url, console)
    heard: list[ProbeResult] = []
    results = await run_probe(target, heard.append)
    assert heard == results  # progress as it goes, one report per probe
    failed = [f"{r.name}: expected {r.expected!r}, observed {r.observed!r}" for r in results]
    failed = [f for f, r in zip(failed, results, strict=True) if not r.ok]
    assert not failed, "\n".join(failed)
    for surface, names in ATTACKS.items():
        probed = {r.name for r in results if r.surface == surface}
        assert names <= probed, (surface, sorted(names - probed))
