"""A service's CPU scheduling policy, set once at its start (``Settings.service_cpu``,
``Settings.analytics_cpu``).

- ``batch``: Linux's SCHED_BATCH. A woken process does not take the CPU from the one
  that woke it; it runs at the next scheduling point. Our processes wake each other for
  every message and statement (a write to the broker's or PostgreSQL's socket, a reply):
  on a saturated host each wake-up otherwise preempted the writer in the middle of its
  batch, and the two switched back and forth. With the processor, Prepare and the
  compaction service in SCHED_BATCH, 48 agents on 2 cores took ~6% less of the machine a
  step; with PostgreSQL and the broker too (deploy/cpu-policy.sh) ~7% less again, and
  Prepare's server p99 fell by a third or more (docs/scaling.md).
- ``idle``: SCHED_IDLE, the process runs only on CPU time nobody else wants (analytics:
  rollups lag under saturation and catch up after).
- ``low``: nice 10. ``normal``: as scheduled.

A sandbox that forbids a policy leaves the process at the normal one, with a warning.
"""

from __future__ import annotations

import logging
import os
from typing import Literal

CpuPolicy = Literal["batch", "idle", "low", "normal"]

log = logging.getLogger(__name__)


def apply_cpu_policy(policy: CpuPolicy) -> None:
    """This process (and the children it starts later) under ``policy``."""
    try:
        if policy == "batch":
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        elif policy == "idle":
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        elif policy == "low":
            os.nice(10)
    except OSError as exc:
        log.warning("CPU policy %r not applied: %s", policy, exc)
