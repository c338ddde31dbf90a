"""A ``ThreadRenderer``'s state as bytes, and back (cold prepare). Pure.

A thread view only grows, so what a warm Prepare keeps in memory can be stored and a
cold one (after a restart, on another instance) continues from it, feeding only the
records committed since, instead of fetching, decoding and rendering the whole history
again. Loading must give exactly the renderer that feeding would have built: the prepared
context of a cold and a warm prepare are byte-identical (tests/unit/test_render_state.py).

What is not stored: the counting function and the summary's covered set (the caller
supplies both, the same ones the state was built with: ``fingerprint`` names everything
the state depends on) and the protected-block cache (the assembler refills it from the
messages). A record whose text a message shows unchanged is stored once, as a reference
to that message.

Layout: magic; the lengths of the head, messages, records and texts (8 bytes each); the
head (JSON); the messages (a pickle, read by an unpickler that refuses every global);
the records (JSON, kept apart: a prepare rarely reads them, so a cold load parses them
only on first use); then the record texts no message shows, as one UTF-8 run. Packed
for storage (two zstd frames) by ``domain.context.state_packing``.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import orjson

from domain.context.rendering import (
    CountFn,
    RecordView,
    SkillActivation,
    SkillLoad,
    ThreadRenderer,
)
from domain.context.state_packing import (
    MAGIC,
    PACKED,
    Unreadable,
    decompress,
    eager_end,
    frames,
)
from domain.policy.context_policy import LargeResultSettings
from domain.policy.sections import ChildTransferPolicy
from domain.window.record_view import OpenGroup

FORMAT = 5  # what the head holds; the layout (magic) is unchanged


# What ``load`` enters around its allocation-heavy parts (a context manager factory).
Building = Callable[[], AbstractContextManager[None]]


def fingerprint(
    message_overhead: int,
    summary_id: str | None,
    epoch: str,
    large: LargeResultSettings,
    counting: str,
    transfer: ChildTransferPolicy | None = None,
) -> str:
    """Everything a view's rendering depends on besides its records: a stored state is
    used only under the same fingerprint."""
    parts = [FORMAT, message_overhead, summary_id, epoch, dataclasses.asdict(large), counting]
    if transfer is not None:
        parts.append(dataclasses.asdict(transfer))
    return orjson.dumps(parts, option=orjson.OPT_SORT_KEYS).decode()


class _Texts:
    """Record texts that no message shows, kept out of the JSON: one UTF-8 run and the
    lengths. Parsing escaped JSON strings cost as much as rendering them; slicing one
    decoded string is cheap."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, text: str) -> int:
        self.items.append(text)
        return len(self.items) - 1


def _rec(r: RecordView, text: int | str) -> list[Any]:
    """``text``: the text itself, its index in the texts run (>= 0), or ``-1 - i`` for
    the content of message ``i``."""
    return [
        r.record_id,
        r.session_sequence,
        r.run_id,
        r.instance_id,
        r.kind,
        r.authority,
        text,
        r.payload,
        r.token_count,
        r.content_length,
        r.content_sha256,
    ]


_FIELDS = tuple(f.name for f in dataclasses.fields(RecordView))
_new = object.__new__


def _unrec(v: list[Any], texts: list[str], contents: list[Any]) -> RecordView:
    # the frozen dataclass's __init__ sets each field through object.__setattr__: filling
    # the instance dict directly gives the same object at a third of the cost, which is
    # most of a records load (one view per record).
    t = v[6]
    if not isinstance(t, str):
        v[6] = texts[t] if t >= 0 else contents[-1 - t]
    rec: RecordView = _new(RecordView)
    rec.__dict__.update(zip(_FIELDS, v, strict=True))
    return rec


def _records(rend: ThreadRenderer, texts: _Texts) -> list[list[Any]]:
    """A record whose text a message shows unchanged (the usual case) refers to that
    message's content instead of storing the text twice."""
    shown: dict[str, int] = {}
    for i, m in enumerate(rend.messages):
        ids = m.get("record_ids")
        if ids and len(ids) == 1 and isinstance(m.get("content"), str):
            shown.setdefault(ids[0], i)
    out: list[list[Any]] = []
    for r in rend.records:
        i = shown.get(r.record_id, -1)
        if i >= 0 and rend.messages[i]["content"] == r.text:
            out.append(_rec(r, -1 - i))
        else:
            out.append(_rec(r, texts.add(r.text)))
    return out


class _Unpickler(pickle.Unpickler):
    """Messages are dicts, lists, strings and numbers: nothing a pickle would need a
    global (a class or function) for. Refusing every global means a damaged or forged
    row can build plain data and nothing else: no object is constructed, no callable
    reached (the restriction ``pickle``'s documentation describes)."""

    def find_class(self, module_name: str, global_name: str, /) -> Any:
        raise pickle.UnpicklingError(f"a render state may not refer to {module_name}.{global_name}")


def dump(rend: ThreadRenderer) -> bytes:
    texts = _Texts()
    records = _records(rend, texts)
    grp = rend._open
    state = {
        "overhead": rend.overhead,
        "summary_id": rend.summary_id,
        "large": dataclasses.asdict(rend.large),
        "tokens": rend.tokens,
        "message_counts": rend.message_counts,
        "task_indices": rend.task_indices,
        "externalized": rend.externalized,
        "skill_loads": {k: dataclasses.astuple(v) for k, v in rend.skill_loads.items()},
        "activations": {k: dataclasses.astuple(v) for k, v in rend.activations.items()},
        "skill_used": rend.skill_used,
        "runs": rend.runs,
        "transfer": dataclasses.asdict(rend.transfer) if rend.transfer else None,
        "transfer_notes": rend.transfer_notes,
        "record_count": rend.record_count,
        "last_sequence": rend.last_sequence,
        "open": None
        if grp is None
        else {
            "assistant": _rec(grp.assistant, grp.assistant.text),
            "calls": grp.calls,
            "results": {k: _rec(v, v.text) for k, v in grp.results.items()},
            "deferred": [_rec(d, d.text) for d in grp.deferred],
            "inherited": grp.inherited,
        },
        "lengths": [len(t) for t in texts.items],
    }
    head = orjson.dumps(state)
    # Pickled, not JSON: the pickle stores each repeated string (roles, categories,
    # reasons, tool names) once and a load shares it, where JSON builds a string per
    # use; building the message dicts is most of a cold load.
    messages = pickle.dumps(rend.messages, protocol=5)
    recs = orjson.dumps(records)
    body = "".join(texts.items).encode("utf-8", "surrogatepass")
    sizes = b"".join(len(x).to_bytes(8, "big") for x in (head, messages, recs, body))
    return b"".join((MAGIC, sizes, head, messages, recs, body))


def _texts(lengths: list[int], body: str) -> list[str]:
    out: list[str] = []
    at = 0
    for n in lengths:
        out.append(body[at : at + n])
        at += n
    return out


def load(
    data: bytes,
    count: CountFn,
    covered: frozenset[str] = frozenset(),
    building: Building = nullcontext,
) -> ThreadRenderer | None:
    """The renderer ``data`` was dumped from, or None when it is of another format.
    Raises ``Unreadable`` when it is of this format but damaged. ``building`` is entered
    around what allocates many objects and frees none (the messages, and the records
    when first read): the caller may pause its process's cyclic collector there
    (``services.prepare.assembly.views.built_to_keep``)."""
    if data.startswith(PACKED):
        eager, rest = frames(data)
        data = decompress(eager)
        lazy: Callable[[], bytes] = lambda: decompress(rest)  # noqa: E731
    elif data.startswith(MAGIC):
        cut = eager_end(data)
        lazy = lambda: data[cut:]  # noqa: E731
    else:
        return None
    try:
        with building():
            return _load(data, lazy, count, covered, building)
    except (pickle.UnpicklingError, orjson.JSONDecodeError, EOFError) as exc:
        raise Unreadable(f"damaged render state: {exc}") from exc
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise Unreadable(f"damaged render state: {exc!r}") from exc


def _decode(body: bytes) -> str:
    # A lone surrogate (which ``dump`` passes through) is rare; the strict decoder is
    # several times faster than any error handler, even when no error occurs.
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body.decode("utf-8", "surrogatepass")


def _unrecs(
    lazy: Callable[[], bytes],
    cut: int,
    lengths: list[int],
    messages: list[dict[str, Any]],
    building: Building,
) -> list[RecordView]:
    """The records of a loaded state, built when first read (most prepares never do)."""
    rest = lazy()
    with building():
        texts = _texts(lengths, _decode(rest[cut:]))
        contents = [m.get("content") for m in messages]
        return [_unrec(v, texts, contents) for v in orjson.loads(rest[:cut])]


def _load(
    data: bytes,
    lazy: Callable[[], bytes],
    count: CountFn,
    covered: frozenset[str],
    building: Building,
) -> ThreadRenderer:
    """``data`` holds at least the head and the messages; ``lazy`` gives the records and
    their texts."""
    n = len(MAGIC)
    sizes = [int.from_bytes(data[n + 8 * k : n + 8 * k + 8], "big") for k in range(4)]
    a = n + 32
    b, c = a + sizes[0], a + sizes[0] + sizes[1]
    if len(data) < c:  # torn
        raise ValueError(f"{len(data)} bytes where the sizes say at least {c}")
    if len(data) > c and len(data) != c + sizes[2] + sizes[3]:
        raise ValueError(f"{len(data)} bytes where the sizes say {c + sizes[2] + sizes[3]}")
    s = orjson.loads(memoryview(data)[a:b])
    messages: list[dict[str, Any]] = _Unpickler(io.BytesIO(data[b:c])).load()
    if not isinstance(messages, list):
        raise TypeError("messages are not a list")
    transfer = s.get("transfer")
    rend = ThreadRenderer(
        count,
        s["overhead"],
        covered,
        s["summary_id"],
        LargeResultSettings(**s["large"]),
        ChildTransferPolicy(**transfer) if transfer else None,
    )
    cut, lengths = sizes[2], s["lengths"]
    rend._records.defer(lambda: _unrecs(lazy, cut, lengths, messages, building))
    rend.messages = messages
    rend.tokens = s["tokens"]
    rend.message_counts = s["message_counts"]
    rend.task_indices = s["task_indices"]
    rend.externalized = s["externalized"]
    rend.skill_loads = {k: SkillLoad(*v) for k, v in s["skill_loads"].items()}
    rend.activations = {k: SkillActivation(*v) for k, v in s["activations"].items()}
    rend.skill_used = {k: (v[0], v[1]) for k, v in s.get("skill_used", {}).items()}
    rend.runs = dict(s.get("runs", {}))
    rend.transfer_notes = list(s.get("transfer_notes", []))
    rend.record_count = s["record_count"]
    rend.last_sequence = s["last_sequence"]
    grp = s["open"]
    if grp is not None:
        rend._open = OpenGroup(
            _unrec(grp["assistant"], [], []),
            grp["calls"],
            {k: _unrec(v, [], []) for k, v in grp["results"].items()},
            [_unrec(d, [], []) for d in grp["deferred"]],
            grp["inherited"],
        )
    return rend
