"""A cold prepare continues from a stored render state (issue 13): what it prepares is
byte-identical to what a warm renderer, fed every record, prepares (R4.3, R2.3)."""

from __future__ import annotations

import dataclasses
import pickle
import random
from typing import Any

import orjson
import pytest

from domain.context.assemble import Assembled, assemble
from domain.context.render_state import dump, fingerprint, load
from domain.context.rendering import RecordView, ThreadRenderer
from domain.context.state_packing import Unreadable, pack, unpack
from domain.policy.context_policy import LargeResultSettings
from domain.window.budget import ModelProfile
from storage.tokenizers import make_counter

COUNT = make_counter("estimate").count
PROFILE = ModelProfile(
    name="t", context_capacity=10_000_000, output_reserve=1000, safety_margin=500
)
LARGE = LargeResultSettings(inline_max_tokens=300, preview_chars=120)
SKILL_SHA = "f" * 64


def _records(n: int, seed: int) -> tuple[list[RecordView], int]:
    """A history of ``n`` records (the last quarter the current run): tool groups with
    several calls, large and secret-bearing results, a skill load and its activation, a
    result without its call, a child result, a cancelled run and a call left unanswered."""
    rng = random.Random(seed)
    out: list[RecordView] = []
    start = (3 * n) // 4

    def add(kind: str, text: str, payload: dict[str, Any], sha: str | None = None) -> None:
        seq = len(out) + 1
        run = "cur" if seq > start else f"r{seq // 40}"
        authority = {"user_input": "user", "tool_outcome": "tool"}.get(kind, "model")
        out.append(
            RecordView(
                f"rec{seq}", seq, run, f"i-{run}", kind, authority, text, payload,
                max(1, len(text) // 3), -1, sha or f"{seq:064x}",
            )
        )  # fmt: skip

    calls = 0
    while len(out) < n:
        r = rng.random()
        if r < 0.15:
            add("user_input", f"question {len(out)} password=hunter{len(out)}xx", {})
        elif r < 0.75:
            k = rng.randint(1, 3)
            ids = [f"c{calls + j}" for j in range(k)]
            calls += k
            tool_calls = [{"call_id": c, "name": "read", "arguments_json": "{}"} for c in ids]
            add("assistant_message", "let me look", {"tool_calls": tool_calls})
            if rng.random() < 0.1 and len(out) + 1 < start:
                add("supplement", "also check the tests", {})  # arrives while open (R5.3)
            answered = ids if rng.random() > 0.05 or len(out) > start else ids[:-1]
            for c in answered:
                size = 2000 if rng.random() < 0.1 else rng.randint(5, 200)
                add("tool_outcome", "x" * size, {"call_id": c, "name": "read", "status": "ok"})
        elif r < 0.8:
            add("tool_outcome", "orphan result", {"call_id": "zz", "name": "q", "status": "error"})
        elif r < 0.83:
            skill = {"name": "deploy", "revision": "2"}
            add(
                "tool_outcome",
                "skill body",
                {"call_id": "s", "name": "s", "skill": skill},
                SKILL_SHA,
            )
            add(
                "resource_activation",
                "",
                {"resource_kind": "skill", "resource_id": "deploy", "version": "2",
                 "content_hash": SKILL_SHA},
            )  # fmt: skip
        elif r < 0.86:
            add("child_result", "child found it", {})
        elif r < 0.88 and len(out) < start:
            add("run_cancelled", "", {})
        else:
            add("assistant_message", f"answer {len(out)}", {"tool_calls": []})
    return out[:n], start


def _renderer(summary: tuple[str, frozenset[str]] | None) -> ThreadRenderer:
    covered = summary[1] if summary else frozenset()
    rend = ThreadRenderer(
        COUNT, PROFILE.message_overhead, covered, "sum1" if summary else None, LARGE
    )
    if summary:
        rend.add_summary("what happened before", 17)
    return rend


def _feed(rend: ThreadRenderer, records: list[RecordView], start: int) -> None:
    for rec in records:
        if rec.session_sequence == start + 1:
            rend.seal_inherited()
        rend.feed(rec, inherited=rec.session_sequence <= start)


def _prepared(rend: ThreadRenderer) -> bytes:
    a: Assembled = assemble(
        profile=PROFILE,
        counting_method="bytes",
        count=COUNT,
        instructions="be careful",
        skill_bindings=[{"name": "deploy", "version": "2", "description": "d"}],
        tools=[{"name": "read", "parameters": {}}],
        thread=rend,
    )
    return orjson.dumps(
        [a.messages, a.report.to_dict(), [dataclasses.astuple(b) for b in a.manifest],
         a.tool_schema_sha256, a.decisions, rend.pending_calls(), rend.last_sequence,
         rend.record_count, sorted(r.record_id for r in rend.records)],
        option=orjson.OPT_SORT_KEYS,
    )  # fmt: skip


def _state(rend: ThreadRenderer) -> bytes:
    """Everything a renderer holds, canonically (``dump``'s pickle depends on which equal
    strings happen to be one object, so its bytes are no comparison)."""
    grp = rend._open
    return orjson.dumps(
        [rend.messages, [dataclasses.astuple(r) for r in rend.records], rend.tokens,
         rend.message_counts, rend.task_indices, rend.externalized,
         {k: dataclasses.astuple(v) for k, v in rend.skill_loads.items()},
         {k: dataclasses.astuple(v) for k, v in rend.activations.items()},
         rend.record_count, rend.last_sequence, rend.overhead, rend.summary_id,
         None if grp is None else [dataclasses.astuple(grp.assistant), grp.calls,
         {k: dataclasses.astuple(v) for k, v in grp.results.items()},
         [dataclasses.astuple(d) for d in grp.deferred], grp.inherited]],
        option=orjson.OPT_SORT_KEYS,
    )  # fmt: skip


@pytest.mark.spec("R4.3")
@pytest.mark.parametrize("n", [60, 500, 3000])
@pytest.mark.parametrize("with_summary", [False, True])
@pytest.mark.parametrize("split", [0.3, 0.8, 0.999])
def test_cold_prepare_from_a_stored_state_is_byte_identical(
    n: int, with_summary: bool, split: float
) -> None:
    records, start = _records(n, seed=n)
    summary = None
    if with_summary:
        summary = ("sum1", frozenset(r.record_id for r in records[: n // 3]))
    warm = _renderer(summary)
    _feed(warm, records, start)
    # The cold one: a state stored at some point (inside the inherited part, mid-run,
    # possibly inside an open group), loaded by a fresh process, then fed the rest.
    at = int(n * split)
    earlier = _renderer(summary)
    _feed(earlier, records[:at], start)
    data = dump(earlier)
    cold = load(data, COUNT, summary[1] if summary else frozenset())
    assert cold is not None
    _feed(cold, records[at:], start)
    assert _prepared(cold) == _prepared(warm)
    assert _state(cold) == _state(warm)
    # ... and prepares stay identical as both go on.
    extra = RecordView("late", n + 1, "cur", "i-cur", "user_input", "user", "more", {}, 2)
    warm.feed(extra, inherited=False)
    cold.feed(extra, inherited=False)
    assert _prepared(cold) == _prepared(warm)


def test_a_state_of_another_format_is_not_used() -> None:
    data = b"ALC-render-state/1\n" + orjson.dumps({"format": 1})
    assert load(data, COUNT) is None


def test_the_fingerprint_names_what_rendering_depends_on() -> None:
    base = fingerprint(4, "s1", "e1", LARGE, "cl100k_base")
    assert base == fingerprint(4, "s1", "e1", LARGE, "cl100k_base")
    others = {
        fingerprint(3, "s1", "e1", LARGE, "cl100k_base"),
        fingerprint(4, "s2", "e1", LARGE, "cl100k_base"),
        fingerprint(4, None, "e1", LARGE, "cl100k_base"),
        fingerprint(4, "s1", "e2", LARGE, "cl100k_base"),
        fingerprint(4, "s1", "e1", LargeResultSettings(300, 121), "cl100k_base"),
        fingerprint(4, "s1", "e1", LARGE, "bytes"),
    }
    assert base not in others and len(others) == 6


def test_a_cold_load_builds_its_records_only_when_read() -> None:
    """A prepare reads messages, not records (issue 13: a cold load skips them); when
    compaction selection reads them, they come in order, older than any fed since."""
    records, start = _records(400, seed=4)
    warm = _renderer(None)
    _feed(warm, records, start)
    earlier = _renderer(None)
    _feed(earlier, records[:300], start)
    cold = load(dump(earlier), COUNT)
    assert cold is not None
    _feed(cold, records[300:], start)
    assemble(
        profile=PROFILE, counting_method="bytes", count=COUNT, instructions="x",
        skill_bindings=[], tools=[], thread=cold,
    )  # fmt: skip
    assert cold._records.deferred
    assert [r.record_id for r in cold.records] == [r.record_id for r in warm.records]
    assert cold.records == warm.records and not cold._records.deferred


def test_a_packed_state_unpacks_to_the_same_bytes() -> None:
    records, start = _records(500, seed=5)
    rend = _renderer(None)
    _feed(rend, records, start)
    data = dump(rend)
    packed = pack(data)
    assert len(packed) < len(data) and unpack(packed) == data
    assert unpack(data) is data  # an unpacked state passes through
    cold = load(packed, COUNT)  # as stored: the records' frame stays packed until read
    assert cold is not None and cold._records.deferred
    assert _state(cold) == _state(rend)
    for damaged in (packed[:-20], packed[:-1] + bytes([packed[-1] ^ 1])):
        with pytest.raises(Unreadable):
            unpack(damaged)
        with pytest.raises(Unreadable):  # found at load, not when the records are read
            load(damaged, COUNT)


class _Forged:
    def __reduce__(self) -> tuple[Any, ...]:
        return (print, ("a forged state ran code",))


def test_a_forged_state_builds_no_object_and_runs_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A row someone wrote into render_states whose messages pickle calls a function:
    refused before anything runs (the unpickler admits no global), reported as
    unreadable so the view renders from its records."""
    records, start = _records(60, seed=6)
    rend = _renderer(None)
    _feed(rend, records, start)
    data = dump(rend)
    n = len(b"ALC-render-state/4\n")
    sizes = [int.from_bytes(data[n + 8 * k : n + 8 * k + 8], "big") for k in range(4)]
    head = data[n + 32 : n + 32 + sizes[0]]
    forged = pickle.dumps([_Forged()], protocol=5)
    rest = data[n + 32 + sizes[0] + sizes[1] :]
    lengths = b"".join(x.to_bytes(8, "big") for x in (len(head), len(forged), sizes[2], sizes[3]))
    with pytest.raises(Unreadable, match=r"may not refer to builtins\.print"):
        load(data[:n] + lengths + head + forged + rest, COUNT)
    assert "ran code" not in capsys.readouterr().out
    with pytest.raises(Unreadable):
        load(data[: len(data) // 2], COUNT)  # a torn row
