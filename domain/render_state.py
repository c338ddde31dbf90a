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
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from domain.policy import LargeResultSettings
from domain.rendering import (
    CountFn,
    RecordView,
    SkillActivation,
    SkillLoad,
    ThreadRenderer,
    _OpenGroup,
)

FORMAT = 1


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


def _rec(r: RecordView) -> list[Any]:
    return [
        r.record_id,
        r.session_sequence,
        r.run_id,
        r.instance_id,
        r.kind,
        r.authority,
        r.text,
        r.payload,
        r.token_count,
        r.content_length,
        r.content_sha256,
    ]


def _unrec(v: list[Any]) -> RecordView:
    return RecordView(*v)


def _messages(rend: ThreadRenderer) -> tuple[list[dict[str, Any]], list[int]]:
    """Messages with the content that repeats a record's text left out (``src`` says
    which record; -1: kept in the message). The key stays in place, so order is kept."""
    index = {r.record_id: i for i, r in enumerate(rend.records)}
    out: list[dict[str, Any]] = []
    src: list[int] = []
    for m in rend.messages:
        ids: list[str] = m.get("record_ids") or []
        i = index.get(ids[0], -1) if len(ids) == 1 else -1
        if i >= 0 and m.get("content") == rend.records[i].text:
            out.append({**m, "content": None})
        else:
            i = -1
            out.append(m)
        src.append(i)
    return out, src


def dump(rend: ThreadRenderer) -> bytes:
    messages, src = _messages(rend)
    grp = rend._open
    state = {
        "format": FORMAT,
        "overhead": rend.overhead,
        "summary_id": rend.summary_id,
        "large": dataclasses.asdict(rend.large),
        "records": [_rec(r) for r in rend.records],
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
            "assistant": _rec(grp.assistant),
            "calls": grp.calls,
            "results": {k: _rec(v) for k, v in grp.results.items()},
            "deferred": [_rec(d) for d in grp.deferred],
            "inherited": grp.inherited,
        },
    }
    return orjson.dumps(state)


def load(
    data: bytes, count: CountFn, covered: frozenset[str] = frozenset()
) -> ThreadRenderer | None:
    """The renderer ``data`` was dumped from, or None when it is of another format."""
    s = orjson.loads(data)
    if s.get("format") != FORMAT:
        return None
    rend = ThreadRenderer(
        count, s["overhead"], covered, s["summary_id"], LargeResultSettings(**s["large"])
    )
    rend.records = [_unrec(v) for v in s["records"]]
    messages: list[dict[str, Any]] = s["messages"]
    for m, i in zip(messages, s["src"], strict=True):
        if i >= 0:
            m["content"] = rend.records[i].text
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
            _unrec(grp["assistant"]),
            grp["calls"],
            {k: _unrec(v) for k, v in grp["results"].items()},
            [_unrec(d) for d in grp["deferred"]],
            grp["inherited"],
        )
    return rend
