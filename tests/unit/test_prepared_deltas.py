"""A large prepared context is stored as what it adds to its thread's last one stored
whole (R10.5, issue 37): every reader still gets the whole context."""

from __future__ import annotations

import random
from dataclasses import replace

import orjson
import pytest

from domain.prepared import deltas
from domain.prepared.deltas import Bases, Delta, shared_prefix
from schemas.answers.prepared import ProtectedBlock
from services.prepare.assembly.prepared import PreparedEntry, PreparedStore
from services.prepare.bodies import PrepareIn
from storage.calls.prepared_contexts import PreparedRow
from tests.unit.fakes.prepare import FakePreparedContexts
from tests.unit.test_prepare_scaleout import instance_a

THREAD = ("s1", "r1", "main", "action")
BIG = deltas.DELTA_MIN_BYTES


@pytest.mark.parametrize("seed", range(20))
def test_the_shared_prefix_is_the_longest_common_prefix(seed: int) -> None:
    rng = random.Random(seed)
    a = rng.randbytes(rng.choice([0, 10, 70_000, 200_000]))
    cut = rng.randint(0, len(a))
    b = a[:cut] + rng.randbytes(rng.randint(0, 300))
    naive = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    assert shared_prefix(a, b) == (min(len(a), len(b)) if naive is None else naive)


def test_a_large_body_is_a_delta_of_its_threads_stored_base_while_it_shares_most() -> None:
    bases = Bases()
    base = b"x" * BIG
    assert bases.delta(THREAD, base + b"more", now=0.0) is None  # no base yet
    bases.stored(THREAD, "p1", base, now=0.0)
    assert bases.delta(THREAD, base + b"more", now=1.0) == Delta("p1", BIG)
    assert bases.delta(("s1", "r1", "main", "completion"), base, now=1.0) is None  # its own
    assert bases.delta(THREAD, b"y" + base, now=1.0) is None  # shares nothing
    assert bases.delta(THREAD, base + b"z" * BIG * 2, now=1.0) is None  # mostly new
    assert bases.delta(THREAD, b"x" * 100, now=1.0) is None  # small: whole
    late = deltas.BASE_MAX_AGE_S + 1
    assert bases.delta(THREAD, base + b"more", now=late) is None  # too old to name


def test_small_bodies_are_never_bases_and_bases_are_bounded_in_bytes() -> None:
    bases = Bases(limit_bytes=3 * BIG)
    bases.stored(THREAD, "small", b"x" * 100, now=0.0)
    assert bases.delta(THREAD, b"x" * BIG, now=0.0) is None
    for i in range(5):
        bases.stored(("s", f"r{i}", "main", "action"), f"p{i}", b"x" * BIG, now=0.0)
    assert bases.held <= 3 * BIG
    assert bases.delta(("s", "r0", "main", "action"), b"x" * BIG, now=0.0) is None  # evicted
    assert bases.delta(("s", "r4", "main", "action"), b"x" * BIG, now=0.0) is not None


def _recording() -> tuple[FakePreparedContexts, list[PreparedRow]]:
    """Stored contexts, and the rows as written (a delta as its own bytes)."""
    stored = FakePreparedContexts()
    written: list[PreparedRow] = []
    save_many = stored.save_many

    async def keep(rows: list[PreparedRow]) -> None:
        written.extend(rows)
        await save_many(rows)

    stored.save_many = keep  # type: ignore[method-assign]
    return stored, written


async def _long_thread() -> tuple[PreparedEntry, list[dict[str, str]]]:
    """A real prepared entry, and the 600 messages of a long thread to give it."""
    a = await instance_a()
    first = await a.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="action"))
    held = await a.svc.gateway.prepared.get(first.prepared_id)
    assert held is not None
    return held, [{"role": "user", "content": f"message {i} " + "w" * 200} for i in range(600)]


@pytest.mark.spec("R10.5")
async def test_a_growing_threads_contexts_are_stored_as_deltas_and_read_back_whole() -> None:
    held, history = await _long_thread()
    stored, written = _recording()
    store = PreparedStore(stored)
    entries: list[PreparedEntry] = []
    for n in range(4):  # the thread grows by a few messages between prepares
        grown = history + [{"role": "user", "content": f"new {k}"} for k in range(n * 3)]
        entries.append(replace(held, prepared_id=f"prep{n}", messages=grown, messages_json=None))
        await store.remember(entries[-1])
        await store.flush()
    assert [r.base_id for r in written] == [None, "prep0", "prep0", "prep0"]
    assert all(len(r.body) < 4096 for r in written[1:])  # only what each one added
    other = PreparedStore(stored)  # another instance reads each one whole
    for entry in entries:
        back = await other.get(entry.prepared_id)
        assert back == entry


@pytest.mark.spec("R10.5")
async def test_a_long_threads_unchanged_context_is_stored_as_its_few_own_bytes() -> None:
    """Prepared again with nothing new (a retry, a re-prepare), a long thread's context
    differs from its base only by its id and report: its messages and its manifest (as
    long as the thread) are read from the base."""
    held, history = await _long_thread()
    stored, written = _recording()
    store = PreparedStore(stored)
    manifest = tuple(
        ProtectedBlock(f"b{i}", "message", "user", "user", "0" * 64, (f"rec{i}",))
        for i in range(600)
    )
    for n in range(2):
        await store.remember(
            replace(
                held,
                prepared_id=f"again{n}",
                messages=history,
                manifest=manifest,
                messages_json=None,
            )
        )
        await store.flush()
    again = written[1]
    back = await PreparedStore(stored).get("again1")  # another instance reads it whole
    assert back is not None and back.messages == history and back.manifest == manifest
    assert again.base_id == "again0"
    assert len(orjson.dumps([b.to_dict() for b in manifest])) > 40_000
    assert len(again.body) < 4096


def test_a_base_is_at_most_half_the_retention_old_when_a_delta_names_it() -> None:
    """Pruning deletes a base once no context younger than the retention names it: a
    delta written later must not name it (it would read as no context at all)."""
    assert deltas.base_age(24 * 3600.0) == deltas.BASE_MAX_AGE_S
    assert deltas.base_age(360.0) == 180.0
    bases = Bases(max_age_s=deltas.base_age(360.0))
    bases.stored(THREAD, "p1", b"x" * BIG, now=0.0)
    assert bases.delta(THREAD, b"x" * BIG + b"more", now=170.0) is not None
    assert bases.delta(THREAD, b"x" * BIG + b"more", now=190.0) is None
