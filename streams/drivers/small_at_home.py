"""The faust driver's two processors, batches in offset order: a batch of fewer than
``offload_from`` messages is applied in the faust process itself, a larger one goes to
the child (``streams.drivers.offload``).

Why: the child is what lets the faust driver drain a backlog at faust's own read rate,
on two cores instead of one, and a backlog comes in large batches. At an agent
runtime's pace a batch is a few events, and handing it to the child costs more than
applying it: the pipe both ways, two more processes woken, the child's own producer
requests (issue 37: ~10% of an agent step's CPU at 48 agents).
``Settings.processor_offload_from`` (``ALC_PROCESSOR_OFFLOAD_FROM``) sets the size.

Order is what the driver guarantees either way (``streams.drivers.pipelined`` calls
``apply`` in offset order, possibly before the previous call returned): a batch applied
here starts once every earlier batch returned; a batch for the child is written to its
pipe once the latest batch applied here returned (the child applies what it is sent in
the order sent). Each handler returns only once its batch is committed and published,
or ends the process (crash-only), so the driver acks as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from streams.admission import RawMessage

Handler = Callable[[list[RawMessage]], Awaitable[object]]


class SmallAtHome:
    def __init__(self, home: Handler, child: Handler, offload_from: int) -> None:
        self.home = home
        self.child = child
        self.offload_from = offload_from
        self._last: asyncio.Future[None] | None = None  # the latest batch returned
        self._last_home: asyncio.Future[None] | None = None  # the latest applied here
        self._last_sent: asyncio.Future[None] | None = None  # the latest sent to the child
        self.applied_here = 0  # batches (for tests and the log)

    async def __call__(self, batch: list[RawMessage]) -> object:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        sent = loop.create_future()
        here = len(batch) < self.offload_from
        # Here: after every earlier batch (the latest returned: each path keeps its own
        # order). To the child: after the latest batch applied here returned and the
        # latest one for the child was sent (the child orders what it is sent).
        before = [self._last] if here else [self._last_home, self._last_sent]
        self._last = done
        if here:
            self._last_home = done
        else:
            self._last_sent = sent
        try:
            for earlier in before:
                if earlier is not None and not earlier.done():
                    await asyncio.shield(earlier)
            if here:
                self.applied_here += 1
                return await self.home(batch)
            # Its waiters resume only after the child's handler wrote this batch to the
            # pipe, which it does before its first await.
            sent.set_result(None)
            return await self.child(batch)
        finally:
            for end in (sent, done):
                if not end.done():
                    end.set_result(None)
