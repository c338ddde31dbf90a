"""A tool result is read once (``domain.compaction.extractive.reading``): the memoised
reading is the reading, and a draft built from memoised readings, with the lines nothing
would keep counted instead of built, is the draft built from every line read afresh;
the lines of a result read together are read as each alone (R11.3: the built-in
summarizer is deterministic; R11.8: a job over its bound reads the same records again).
Pure."""

from __future__ import annotations

import functools
import json
import random
import sys
import tracemalloc

import pytest

import domain.compaction.extractive.salience as sal
from domain.compaction.drafts import SourceItem, SummaryRequest
from domain.compaction.extractive import extract_draft, reading
from domain.compaction.extractive.reading import Other, ResultLines, Signal, read_result
from domain.compaction.extractive.signals import is_signal

TRACEBACK = """collected 12 items
tests/test_pay.py::test_refund PASSED
Traceback (most recent call last):
  File "src/pay/ledger.py", line 88, in post
    raise LedgerError(code)
LedgerError: LEDGER_SYNC_TIMEOUT after 30.5 s
=== 1 failed, 11 passed in 4.20s ==="""


def _errors(lines: list[str]) -> list[bool]:
    """``sal.errors_each`` given each line's ``is_signal``, as ``reading`` gives them."""
    return sal.errors_each(lines, [is_signal(ln) for ln in lines])


def _listing(rng: random.Random, n: int) -> str:
    """Lines of one shape (``benchmarks.agents``'s file): the greedy's inert lines."""
    return "\n".join(
        f"    v{rng.randrange(10**6)} = compute(a{rng.randrange(99)}, {rng.random():.6f})"
        for _ in range(n)
    )


def _hits(rng: random.Random, n: int) -> str:
    """A grep's hits: one shape, each naming a path (worth keeping, not inert)."""
    return "\n".join(f"src/m{rng.randrange(9)}/f{k}.py:{rng.randrange(400)}: x" for k in range(n))


def _segment(seed: int, questions: int) -> tuple[SourceItem, ...]:
    rng = random.Random(seed)
    items: list[SourceItem] = []

    def add(kind: str, role: str, text: str, **kw: object) -> None:
        n = len(items) + 1
        items.append(SourceItem(f"rec_{n:032x}", n, kind, role, text, **kw))  # type: ignore[arg-type]

    for q in range(questions):
        add("user_input", "user", f"Q{q}: why does module m{rng.randrange(40)} fail?")
        args = (("read_file", json.dumps({"path": f"src/m{q % 7}/file{q}.py"})),)
        add("assistant_message", "assistant", "ResultLines it.", call_id=f"c{q}", arguments=args)
        kind = q % 4
        text = (_listing, _hits)[kind % 2](rng, 10 + 30 * (q % 3)) if kind < 2 else TRACEBACK
        status = "error" if kind == 3 else "ok"
        call = f"c{q}"
        add("tool_outcome", "tool", text, tool_name="read_file", tool_status=status, call_id=call)
        add("assistant_message", "assistant", f"Answer {q}: the guard in m{q}.py is missing.")
    return tuple(items)


def _request(segment: tuple[SourceItem, ...], tokens: int) -> SummaryRequest:
    return SummaryRequest(segment, None, tokens, "job:model:0")


def _fresh() -> reading._Memo:
    """Readings that are never memoised and build every line."""
    return reading._Memo(0, functools.partial(reading._read, inert=False))


@pytest.mark.spec("R11.3")
def test_a_memoised_reading_is_the_reading_and_its_text_is_the_key() -> None:
    rng = random.Random(3)
    for text, failed in [(TRACEBACK, False), (TRACEBACK, True), (_listing(rng, 40), False)]:
        first = read_result(text, failed)
        assert read_result(text, failed) is first  # memoised
        assert first == reading._read(text, failed)  # what reading it again gives
    # the same words, another record: the same reading; a failed call's reads otherwise
    assert read_result(str(TRACEBACK), False) is read_result(TRACEBACK, False)
    assert read_result(TRACEBACK, True) is not read_result(TRACEBACK, False)


@pytest.mark.spec("R11.3")
def test_the_memo_is_bounded_by_the_bytes_its_readings_hold() -> None:
    texts = [f"line {k}\n" * 4 for k in range(10)]  # one shape: the same weight each
    weight = reading._weight(texts[0], reading._read(texts[0], False))
    assert weight > len(texts[0]) + reading.READING_BYTES
    memo = reading._Memo(3 * weight + weight // 2)
    for t in texts:
        memo.read(t, False)
    assert memo.held <= 3 * weight + weight // 2
    assert [key for key, _ in memo._readings] == texts[-3:]  # the least recently used out
    memo.read(texts[-3], False)  # used again: now the newest
    memo.read(texts[0], False)  # read again: the least recently used goes
    assert [key for key, _ in memo._readings] == [texts[-1], texts[-3], texts[0]]
    assert memo.held == 3 * weight


@pytest.mark.spec("R11.3")
def test_a_readings_weight_is_at_least_the_memory_it_holds() -> None:
    # Measured, not assumed: the memo's bound holds only if no shape of result costs
    # more memory than it is weighed at (short distinct lines, repeated rows, tracebacks,
    # long lines full of features).
    rng = random.Random(11)
    shapes = {
        "listing": [_listing(rng, 40) for _ in range(50)],
        "few hits": [_hits(rng, 2) for _ in range(50)],
        "many hits": [_hits(rng, 40) for _ in range(50)],
        "traceback": [f"{TRACEBACK}\n{k}" for k in range(50)],
        "distinct": [  # no two lines of one shape: every line kept, with its features
            "\n".join(
                f"{'step ' * j}{w} src/{w}/m{k}.py:{j} size={j * k}kB 'key_{w}'"
                for j, w in enumerate(("alpha", "beta", "gamma", "delta", "omega", "sigma"))
            )
            for k in range(50)
        ],
        "cjk": [  # outside Latin-1: two bytes a character, weighed at four
            "\n".join(f"第{j}行 文件 src/模块{k}.py:{j} 大小={j * k}KB 状态正常" for j in range(8))
            for k in range(50)
        ],
    }
    for name, texts in shapes.items():
        reading._read(texts.pop(), False)  # the patterns' and the interpreter's first use
        tracemalloc.start()
        try:
            readings = [reading._read(t, False) for t in texts]
            held, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        weighed = sum(
            reading._weight(t, r) - reading._bytes(t) for t, r in zip(texts, readings, strict=True)
        )
        # the key: a text's characters take one to four bytes each (plus a fixed header)
        assert all(sys.getsizeof(t) <= reading._bytes(t) + 100 for t in texts), name
        assert held <= weighed <= 4 * held, (name, held, weighed)


@pytest.mark.spec("R11.3")
def test_inert_lines_are_lines_of_a_repeated_shape_worth_too_little_to_keep() -> None:
    rng = random.Random(5)
    listing = read_result(_listing(rng, 40), False)
    assert isinstance(listing.uses[0], Other)  # the first line: the trace the call ran
    assert all(u is None for u in listing.uses[1:])
    few = read_result(_hits(rng, 2), False)  # a shape not repeated: never inert
    assert all(isinstance(u, Other) for u in few.uses)
    many = read_result(_hits(rng, 40), False)  # forty hits of one shape: each worth little
    assert many.uses[1:] == (None,) * 39
    failed = read_result(TRACEBACK, True)
    assert [u.text for u in failed.uses if isinstance(u, Signal)][
        -1
    ] == "1 failed, 11 passed in 4.20s"
    assert failed == ResultLines(failed.lines, True, failed.uses)


@pytest.mark.spec("R11.3", "R11.8")
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("tokens", [120, 600, 2_000, 8_000])
def test_a_draft_from_memoised_readings_is_the_draft_read_afresh(
    seed: int, tokens: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    req = _request(_segment(seed, 24), tokens)
    memoised = [extract_draft(req), extract_draft(req)]  # cold, then warm
    # the segment has inert lines: skipped in the memoised drafts, built in the fresh one
    results = [i for i in req.segment if i.kind == "tool_outcome"]
    assert any(None in read_result(i.text, i.tool_status != "ok").uses for i in results)
    monkeypatch.setattr(reading, "_MEMO", _fresh())
    afresh = extract_draft(req)
    assert memoised[0] == afresh and memoised[1] == afresh


# Lines where a pattern could reach past a line's edge if lines were read together: a
# number at the end and a unit at the start of the next, quotes and names at the edges,
# error words, paths, ids, CJK and accented words, decoration.
EDGES = [
    "took 5",
    "ms later, then 3.5 s and 1,024 rows in src/app/main.py",
    "`quoted",
    "name` KeyError: 'currency_code' at LEDGER_SYNC_TIMEOUT",
    "timed out after 30s; HTTP 503 from svc-7f3a2c1d",
    "status: 404",
    "ValueError",
    "PAY-4821 E4127 acct_81a2 req-77f CamelCaseName snake_case_name",
    "    v123456 = compute(a12, 0.123456)",
    "=====  [58%]  =====",
    "错误\uff1a无法连接数据库 timeout 5 ms",
    "Ошибка: файл не найден ./config/app.yaml",
    "v3.11.4 ~/work/x.txt ../up/a.md 9f8e7d6c5b4a",
    "exit code 2",
    "",
    "aaaa",
    "aaab",
]


@pytest.mark.spec("R11.3")
def test_features_read_together_are_each_lines_own_in_their_order() -> None:
    rng = random.Random(11)
    lines = EDGES + [sal.clip(ln, 200) for ln in (_listing(rng, 30) + "\n" + TRACEBACK).split("\n")]
    ascii_only = [t for t in lines if t.isascii()] + ["abcD Dabc aBc abc_def x1y ABC", "a"]
    for texts in (lines, lines[::-1], lines[:1], [], ascii_only):
        together = sal.features_each(texts, path_weight=sal.W_PATH_OUTPUT)
        alone = [sal.features(t, path_weight=sal.W_PATH_OUTPUT) for t in texts]
        assert [list(d.items()) for d in together] == [list(d.items()) for d in alone]
        assert _errors(texts) == [
            sal.ERROR_SHAPE.search(t) is not None or is_signal(t) for t in texts
        ]
        assert sal.shapes(texts) == [sal.shape(t) for t in texts]
    assert any(_errors(EDGES)) and not all(_errors(EDGES))
    assert ("num", "5ms") not in sal.features_each(EDGES[:2])[0]  # no unit from the next line


@pytest.mark.spec("R11.3")
@pytest.mark.parametrize("seed", [1, 2])
def test_the_floors_needs_of_every_suffix_are_needs_of_each(seed: int) -> None:
    """``_Floor.suffix_needs`` (one pass for the drop search) gives what ``need`` of each
    suffix of a drop order gives, at any level."""
    from domain.compaction.extractive.draft import _candidates
    from domain.compaction.extractive.fill import Fill
    from domain.compaction.extractive.floor import _Floor

    fill = Fill(_candidates(_segment(seed, 24)), 2_000)
    frags = [f for f in fill.c.frags if f.tier is not None]
    for f in frags:
        f.full = f.full or f.text
    floor = _Floor(fill, frags)
    rng = random.Random(seed)
    for level in (0.0, 40.0, 400.0):
        order = list(range(len(frags)))
        rng.shuffle(order)
        needs = floor.suffix_needs(order, level)
        assert needs == [floor.need(sorted(order[n:]), level) for n in range(len(order) + 1)]
        assert needs[0] > needs[len(order) // 2] > needs[-1] == 0


@pytest.mark.spec("R11.3")
@pytest.mark.parametrize(
    "said", ["the field was not found", "le champ est introuvable", "字段不存在", "поле не найдено"]
)
def test_what_an_error_names_is_told_by_its_shape_in_every_language(said: str) -> None:
    """A quoted name is what an error names when the text is shaped as an error (an
    exception class, an error line), whatever words surround it; without that shape no
    language's words make it one."""
    shaped = sal.features(f"KeyError: 'currency code' ({said})")
    assert shaped[("id", "currency code")] == sal.W_IDENT
    assert _errors([f"raised ValueError: 'currency code' {said}"]) == [True]
    plain = sal.features(f"'currency code' {said}")
    assert ("id", "currency code") not in plain
    assert _errors([f"'currency code' {said}"]) == [False]
