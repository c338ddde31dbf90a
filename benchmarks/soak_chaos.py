"""The soak's faults: ``kill -9`` of our services (each restarted at once, as a supervisor
would) and a restart of Kafka and of PostgreSQL through ``deploy/kafka.sh`` /
``deploy/postgres.sh`` (``down`` then ``up``, the same ``ALC_*`` environment). On a
replicated cluster, ``kafka-node-<i>`` is a ``kill -9`` of one broker
(``deploy/kafka.sh kill-node i``, then ``start-node i``) while the others keep serving.

Faults never overlap: each waits until the load recovered from the previous one (an
append acknowledged after the fault, then a prepare answered) or a bound passed. A
supervisor restarts any service that exits on its own and counts it — a service that
dies of an outage is a finding, not noise.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.soak_db import broker_answers
from benchmarks.soak_load import Ledger
from devstack.launcher import Proc, ServiceSet

RECOVERY_BOUND_S = 120.0  # a fault not recovered from by then is reported as such
RESTART_DELAY_S = 0.5  # a supervisor's restart delay after a kill


@dataclass
class Fault:
    target: str  # processor | prepare | compaction | kafka | postgres | kafka-node-<i>
    action: str  # kill -9 | restart
    at_s: float  # since the soak started
    wall: float  # time.time() at the fault, to compare with database timestamps
    down_s: float = 0.0  # until the service/broker/database was back (ready)
    recovered_s: float | None = None  # until the next append+prepare after the outage
    next_summary_s: float | None = None  # until a compaction candidate was saved again
    started_mono: float = 0.0
    outage_mono: float = 0.0  # the kill, or when the broker/database had stopped

    def row(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("started_mono")
        d.pop("outage_mono")
        return d


def plan(kills: int) -> list[str]:
    """Interleaved: each service killed ``kills`` times; Kafka restarted after the first
    round of kills, PostgreSQL after the second (or the first, with one round)."""
    order: list[str] = []
    for i in range(kills):
        order += ["processor", "prepare", "compaction"]
        if i == 0:
            order.append("kafka")
        if i == min(1, kills - 1):
            order.append("postgres")
    return order


@dataclass
class Chaos:
    # The soak's one set, or named processes (``processor-2``, ``prepare-1``...) to target.
    services: ServiceSet | Mapping[str, Proc]
    repo: Path
    env: dict[str, str]
    ledger: Ledger
    t0: float
    log: Callable[[str], None]
    faults: list[Fault] = field(default_factory=list)
    unexpected_exits: list[str] = field(default_factory=list)
    start_timeout_s: float = 90.0  # a restarted service's readiness (Proc.start)
    _busy: set[str] = field(default_factory=set)
    _background: set[asyncio.Task[None]] = field(default_factory=set)  # referenced: not GC'd

    def procs(self) -> Mapping[str, Proc]:
        s = self.services
        if not isinstance(s, ServiceSet):
            return s
        return {"processor": s.processor, "prepare": s.prepare, "compaction": s.compaction}

    async def run(self, targets: list[str], window: tuple[float, float]) -> None:
        """Inject ``targets`` spread evenly over ``window`` (seconds after t0)."""
        start, end = window
        gap = (end - start) / max(1, len(targets))
        for i, target in enumerate(targets):
            due = self.t0 + start + i * gap
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            fault = await self.inject(target)
            await self._await_recovery(fault)

    async def inject(self, target: str) -> Fault:
        while target in self._busy:  # the supervisor is restarting it already
            await asyncio.sleep(0.2)
        now = time.monotonic()
        action = "restart" if target in ("kafka", "postgres") else "kill -9"
        node = target.removeprefix("kafka-node-") if target.startswith("kafka-node-") else None
        fault = Fault(target, action, round(now - self.t0, 1), time.time(), started_mono=now)
        fault.outage_mono = now
        self.faults.append(fault)
        self.log(f"fault {len(self.faults)}: {action} {target} at {fault.at_s} s")
        if target in ("kafka", "postgres"):
            # A broker shutting down still serves for a while: the outage starts once it
            # is down, so a quick append before that does not count as recovery.
            await self._script(target, "down")
            fault.outage_mono = time.monotonic()
            await self._script(target, "up")
            self.log(f"  {target}: down in {fault.outage_mono - now:.1f} s, up in"
                     f" {time.monotonic() - fault.outage_mono:.1f} s")  # fmt: skip
        elif node is not None:
            await self._restart_node(int(node))
        else:
            proc = self.procs()[target]
            self._busy.add(target)
            try:
                proc.kill9()
                await asyncio.sleep(RESTART_DELAY_S)
                await self._start(proc)
            finally:
                self._busy.discard(target)
        fault.down_s = round(time.monotonic() - now, 2)
        return fault

    async def _restart_node(self, node: int) -> None:
        """SIGKILL, then start it again as a supervisor would. ``start-node`` waits until a
        JVM admin tool gets an answer, and a JVM can take minutes to start on busy cores:
        the node counts as back as soon as it answers us (the script goes on meanwhile)."""
        await self._script("kafka", "kill-node", str(node))
        port = int(self.env.get("ALC_KAFKA_CLUSTER_PORT", "29092")) + node - 1
        start = asyncio.create_task(self._script("kafka", "start-node", str(node)))
        while not start.done():
            if await broker_answers(f"127.0.0.1:{port}", node):
                # Its outcome no longer matters (a slow probe, or the cluster stopped).
                self._background.add(start)
                start.add_done_callback(lambda t: t.cancelled() or t.exception())
                start.add_done_callback(self._background.discard)
                return
            await asyncio.sleep(1.0)
        start.result()  # it failed (raises) or answered: back

    async def _await_recovery(self, fault: Fault) -> None:
        # Checked at least once: the load may have recovered while the faulty part was
        # still restarting (a broker of a cluster), longer than the bound.
        deadline = fault.started_mono + RECOVERY_BOUND_S
        while True:
            done = self.ledger.recovered_at(fault.outage_mono)
            if done is not None and done <= deadline:
                fault.recovered_s = round(done - fault.started_mono, 2)
                self.log(f"  {fault.target}: back in {fault.down_s} s, load recovered in"
                         f" {fault.recovered_s} s")  # fmt: skip
                return
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.2)
        self.log(f"  {fault.target}: load NOT recovered within {RECOVERY_BOUND_S} s")

    async def _script(self, target: str, *cmd: str) -> None:
        script = self.repo / "deploy" / f"{target}.sh"
        proc = await asyncio.create_subprocess_exec(
            "bash",
            str(script),
            *cmd,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{script.name} {cmd} failed ({proc.returncode}):\n{out.decode()}")

    async def _start(self, proc: Proc) -> None:
        """Start (and wait for readiness), again and again while it fails: a service that
        cannot reach Kafka or PostgreSQL at start-up exits, a supervisor starts it again."""
        deadline = time.monotonic() + RECOVERY_BOUND_S
        while True:
            try:
                await asyncio.to_thread(proc.start, self.start_timeout_s)
                return
            except RuntimeError as exc:
                if time.monotonic() > deadline:
                    raise
                self.log(f"  {proc.name} did not start ({str(exc).splitlines()[0]}); again")
                await asyncio.sleep(1.0)

    async def supervise(self, stop: asyncio.Event) -> None:
        """Restart a service that exited without being killed by us (and count it)."""
        while not stop.is_set():
            for name, proc in self.procs().items():
                if name in self._busy or proc.popen is None or proc.popen.poll() is None:
                    continue
                code = proc.popen.returncode
                at = round(time.monotonic() - self.t0, 1)
                self.unexpected_exits.append(f"{name} exited {code} at {at} s ({proc.log_path})")
                self.log(f"supervisor: {name} exited {code} on its own at {at} s; restarting")
                self._busy.add(name)
                try:
                    await self._start(proc)
                finally:
                    self._busy.discard(name)
            await asyncio.sleep(0.5)
