"""A ``ThreadRenderer``'s state as bytes, and back (issue 13: cold prepare). Pure.

A thread view only grows, so what a warm Prepare keeps in memory can be stored and a
cold one (after a restart, on another instance) continues from it, feeding only the
records committed since, instead of fetching, decoding and rendering the whole history
again. Loading must give exactly the renderer that feeding would have built: the prepared
context of a cold and a warm prepare are byte-identical (tests/unit/test_render_state.py).

What is not stored: the counting function and the summary's covered set (the caller
supplies both, the same ones the state was built with: ``fingerprint`` names everything
the state depends on) and the protected-block cache (the assembler refills it from the
messages). A message whose content is its source record's text is stored once, as a
reference to that record.

Layout: magic, the lengths of the head and of the records section (8 bytes each), the
head (JSON), the records (JSON, kept apart: a prepare rarely reads them, so a cold load
parses them only on first use), then every text as one UTF-8 run.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import zstandard

from domain.policy import LargeResultSettings
from domain.rendering import (
    CountFn,
    RecordView,
    SkillActivation,
    SkillLoad,
    ThreadRenderer,
    _OpenGroup,
)

FORMAT = 3
_MAGIC = b"ALC-render-state/3\n"
_PACKED = b"ALC-render-state/3+zstd\n"


def fingerprint(
    message_overhead: int,
    summary_id: str | None,
    epoch: str,
    large: LargeResultSettings,
    counting: str,
) -> str:
    """Everything a view's rendering depends on besides its records: a stored state is
    used only under the same fingerprint."""
    parts = [FORMAT, message_overhead, summary_id, epoch, dataclasses.asdict(large), counting]
    return orjson.dumps(parts, option=orjson.OPT_SORT_KEYS).decode()


class _Texts:
    """Every text of a state, kept out of the JSON: one UTF-8 run and the lengths. Parsing
    escaped JSON strings cost as much as rendering them; slicing one decoded string is
    cheap."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, text: str) -> int:
        self.items.append(text)
        return len(self.items) - 1


def _rec(r: RecordView, texts: _Texts) -> list[Any]:
    return [
        r.record_id,
        r.session_sequence,
        r.run_id,
        r.instance_id,
        r.kind,
        r.authority,
        texts.add(r.text),
        r.payload,
        r.token_count,
        r.content_length,
        r.content_sha256,
    ]


_FIELDS = tuple(f.name for f in dataclasses.fields(RecordView))
_new = object.__new__


def _unrec(v: list[Any], texts: list[str]) -> RecordView:
    # The frozen dataclass's __init__ sets each field through object.__setattr__: filling
    # the instance dict directly gives the same object at a third of the cost, which is
    # most of a cold load (one view per record).
    v[6] = texts[v[6]]
    rec: RecordView = _new(RecordView)
    rec.__dict__.update(zip(_FIELDS, v, strict=True))
    return rec


def _messages(
    rend: ThreadRenderer, records: list[list[Any]], texts: _Texts
) -> tuple[list[dict[str, Any]], list[int]]:
    """Messages with their content out of line (``src``: the text's index; -1: content
    kept in the message). Content that repeats its record's text is that record's text.
    The key stays in place, so the message's key order is kept."""
    index = {r.record_id: i for i, r in enumerate(rend.records)}
    out: list[dict[str, Any]] = []
    src: list[int] = []
    for m in rend.messages:
        content = m.get("content")
        if not isinstance(content, str):
            out.append(m)
            src.append(-1)
            continue
        ids: list[str] = m.get("record_ids") or []
        i = index.get(ids[0], -1) if len(ids) == 1 else -1
        if i >= 0 and content == rend.records[i].text:
            src.append(records[i][6])
        else:
            src.append(texts.add(content))
        out.append({**m, "content": None})
    return out, src


def dump(rend: ThreadRenderer) -> bytes:
    texts = _Texts()
    records = [_rec(r, texts) for r in rend.records]
    messages, src = _messages(rend, records, texts)
    grp = rend._open
    state = {
        "overhead": rend.overhead,
        "summary_id": rend.summary_id,
        "large": dataclasses.asdict(rend.large),
        "messages": messages,
        "src": src,
        "tokens": rend.tokens,
        "message_counts": rend.message_counts,
        "task_indices": rend.task_indices,
        "externalized": rend.externalized,
        "skill_loads": {k: dataclasses.astuple(v) for k, v in rend.skill_loads.items()},
        "activations": {k: dataclasses.astuple(v) for k, v in rend.activations.items()},
        "record_count": rend.record_count,
        "last_sequence": rend.last_sequence,
        "open": None
        if grp is None
        else {
            "assistant": _rec(grp.assistant, texts),
            "calls": grp.calls,
            "results": {k: _rec(v, texts) for k, v in grp.results.items()},
            "deferred": [_rec(d, texts) for d in grp.deferred],
            "inherited": grp.inherited,
        },
        "lengths": [len(t) for t in texts.items],
    }
    head = orjson.dumps(state)
    recs = orjson.dumps(records)
    body = "".join(texts.items).encode("utf-8", "surrogatepass")
    sizes = len(head).to_bytes(8, "big") + len(recs).to_bytes(8, "big")
    return b"".join((_MAGIC, sizes, head, recs, body))


def pack(data: bytes) -> bytes:
    """``dump``'s bytes compressed for storage: a fifth of the size (zstd level 1), so a
    cold prepare reads a fifth from PostgreSQL (issue 13: reading 100 MB took 0.8 s).
    zstd releases the GIL: callers run this in a worker thread."""
    return _PACKED + zstandard.ZstdCompressor(level=1).compress(data)


def unpack(data: bytes) -> bytes:
    """``pack``'s input back; anything else is returned as it is (``load`` judges it).
    A corrupt frame raises ``zstandard.ZstdError``."""
    if not data.startswith(_PACKED):
        return data
    return zstandard.ZstdDecompressor().decompress(memoryview(data)[len(_PACKED) :])


def _texts(lengths: list[int], body: str) -> list[str]:
    out: list[str] = []
    at = 0
    for n in lengths:
        out.append(body[at : at + n])
        at += n
    return out


def load(
    data: bytes, count: CountFn, covered: frozenset[str] = frozenset()
) -> ThreadRenderer | None:
    """The renderer ``data`` was dumped from, or None when it is of another format."""
    if not data.startswith(_MAGIC):
        return None
    with _built_to_keep():
        return _load(data, count, covered)


@contextmanager
def _built_to_keep() -> Iterator[None]:
    """Loading allocates a few objects per record and frees none: the cyclic collector
    would scan the growing heap again and again for nothing (a fifth of a cold load), so
    it is paused. What was built is then promoted straight to the oldest generation
    (freeze, then unfreeze: two list splices, no scan) instead of being scanned by the
    young collections that would follow (another fifth). Garbage cycles promoted with it
    are still collected, by the next full collection."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if paused:
            gc.enable()


def _decode(body: bytes) -> str:
    # A lone surrogate (which ``dump`` passes through) is rare; the strict decoder is
    # several times faster than any error handler, even when no error occurs.
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body.decode("utf-8", "surrogatepass")


def _unrecs(section: bytes, texts: list[str]) -> list[RecordView]:
    with _built_to_keep():
        return [_unrec(v, texts) for v in orjson.loads(section)]


def _load(data: bytes, count: CountFn, covered: frozenset[str]) -> ThreadRenderer:
    n = len(_MAGIC)
    at = n + 16
    mid = at + int.from_bytes(data[n : n + 8], "big")
    end = mid + int.from_bytes(data[n + 8 : at], "big")
    s = orjson.loads(memoryview(data)[at:mid])
    texts = _texts(s["lengths"], _decode(data[end:]))
    rend = ThreadRenderer(
        count, s["overhead"], covered, s["summary_id"], LargeResultSettings(**s["large"])
    )
    section = data[mid:end]
    rend.defer_records(lambda: _unrecs(section, texts))
    messages: list[dict[str, Any]] = s["messages"]
    for m, i in zip(messages, s["src"], strict=True):
        if i >= 0:
            m["content"] = texts[i]
    rend.messages = messages
    rend.tokens = s["tokens"]
    rend.message_counts = s["message_counts"]
    rend.task_indices = s["task_indices"]
    rend.externalized = s["externalized"]
    rend.skill_loads = {k: SkillLoad(*v) for k, v in s["skill_loads"].items()}
    rend.activations = {k: SkillActivation(*v) for k, v in s["activations"].items()}
    rend.record_count = s["record_count"]
    rend.last_sequence = s["last_sequence"]
    grp = s["open"]
    if grp is not None:
        rend._open = _OpenGroup(
            _unrec(grp["assistant"], texts),
            grp["calls"],
            {k: _unrec(v, texts) for k, v in grp["results"].items()},
            [_unrec(d, texts) for d in grp["deferred"]],
            grp["inherited"],
        )
    return rend
