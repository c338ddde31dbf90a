"""CPU time per process tree, from Linux ``/proc``: what a benchmark's window cost each
of our services, the broker, PostgreSQL and the benchmark process itself.

``snapshot()`` reads every process's user + system ticks once; two snapshots and a
``Groups`` (which pids belong to which name) give each name's CPU seconds between them.
A process that started between the snapshots counts from zero; one that exited is lost
(the services and the database pools live through a window).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    comm: str
    ticks: int


@dataclass(frozen=True)
class Snapshot:
    procs: dict[int, Proc]
    machine_busy: int  # jiffies of all cores, idle and iowait excluded
    machine_total: int


def _stat(pid: str) -> Proc | None:
    try:
        head, rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)
    except OSError:  # gone meanwhile
        return None
    f = rest.split()
    return Proc(int(pid), int(f[1]), head.split("(", 1)[1], int(f[11]) + int(f[12]))


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def snapshot() -> Snapshot:
    procs = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (p := _stat(entry.name)) is not None:
            procs[p.pid] = p
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]
    return Snapshot(procs, sum(ticks) - idle, sum(ticks))


def descendants(snap: Snapshot, root: int) -> set[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for p in snap.procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in snap.procs and pid not in out:
            out.add(pid)
            todo += children.get(pid, [])
    return out


def kafka_brokers(snap: Snapshot, port: int) -> set[int]:
    """The java broker(s) whose server.properties listens on ``port``; every
    ``kafka.Kafka`` process when none says so (a broker started otherwise)."""
    all_brokers, ours = set(), set()
    for p in snap.procs.values():
        if p.comm != "java" or "kafka.Kafka" not in (cmd := cmdline(p.pid)):
            continue
        all_brokers.add(p.pid)
        props = Path(cmd.split()[-1])
        try:
            if f":{port}" in props.read_text():
                ours.add(p.pid)
        except OSError:
            pass
    return ours or all_brokers


def postgres_split(snap: Snapshot, database: str) -> tuple[set[int], set[int]]:
    """(backends connected to ``database``, every other postgres process: the server's
    own workers and other databases' backends)."""
    mine: set[int] = set()
    other: set[int] = set()
    for p in snap.procs.values():
        if p.comm != "postgres":
            continue
        # A backend's title: "postgres: <user> <database> <host(port)> <state>".
        words = cmdline(p.pid).split()
        (mine if len(words) > 2 and words[2] == database else other).add(p.pid)
    return mine, other


@dataclass
class Groups:
    """Names and their pids, classified on the later snapshot."""

    pids: dict[str, set[int]] = field(default_factory=dict)

    def seconds(self, before: Snapshot, after: Snapshot) -> dict[str, float]:
        out = {}
        for name, pids in self.pids.items():
            ticks = 0
            for pid in pids:
                b = before.procs.get(pid)
                a = after.procs.get(pid)
                if a is not None:
                    # the same pid reused by another process counts from zero
                    same = b is not None and b.comm == a.comm and b.ticks <= a.ticks
                    ticks += a.ticks - (b.ticks if same and b else 0)
            out[name] = ticks / TCK
        return out


POLICIES = {os.SCHED_OTHER: "normal", os.SCHED_BATCH: "batch", os.SCHED_IDLE: "idle"}


def cpu_policies(g: Groups) -> dict[str, str]:
    """Each name's scheduling policy (``streams.tuning.cpu_policy``): its processes'
    policies joined by "+" where they differ; "gone" when none of them is left."""
    out = {}
    for name, pids in g.pids.items():
        seen = set()
        for pid in pids:
            try:
                seen.add(POLICIES.get(os.sched_getscheduler(pid), "other"))
            except OSError:  # exited since it was classified
                continue
        out[name] = "+".join(sorted(seen)) or "gone"
    return out


def machine_seconds(before: Snapshot, after: Snapshot) -> float:
    """Busy CPU seconds of the whole machine (every process, ours or not)."""
    return (after.machine_busy - before.machine_busy) / TCK


def busy_share(before: Snapshot, after: Snapshot) -> float:
    total = after.machine_total - before.machine_total
    return (after.machine_busy - before.machine_busy) / total if total else 0.0


def local_ports(pids: set[int]) -> set[int]:
    """The local TCP ports of the sockets ``pids`` hold open (their clients' side of a
    connection to PostgreSQL, say)."""
    inodes = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[9] in inodes:
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports
