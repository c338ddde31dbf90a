"""A model summarizer's answer, read leniently (R11.3, R11.4). Pure.

The OpenAI-compatible summarizer's prompt (``services/compaction/prompt.md``) asks for
one JSON object of cited entries by section: the user's requests, decisions with their
reasons, findings, artifacts, errors with their fixes, open questions, the state and the
next step. Models answer around it: prose or a code fence around the JSON, an answer cut
off at the output limit, missing or extra sections, the old flat draft keys, wrong
types, inline ``[id]`` citations, entries that cite nothing or records outside the
segment, statements too long for the bound, another language than the transcript's.
``read_answer`` keeps what is usable and counts what it left out; only an answer with no
cited entry of the segment fails (``InvalidSummary``) — language and phrasing are never
a reason. What an entry says is for the text rules the worker applies to every draft
(``domain.compaction.text_rules``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from domain.compaction.bound import fit_draft
from domain.compaction.drafts import FACT_FIELDS, Fact, SummaryDraft, SummaryRequest
from domain.compaction.errors import InvalidSummary

# answer section -> (draft field, statement prefix); the old flat keys are read too.
SECTIONS: dict[str, tuple[str, str]] = {
    "requests": ("verified_facts", "User asked: "),
    "decisions": ("decisions", ""),
    "findings": ("verified_facts", ""),
    "artifacts": ("verified_facts", ""),
    "errors": ("failures", ""),
    "open_questions": ("unresolved_questions", ""),
    "current_state": ("verified_facts", "State: "),
    "next_step": ("verified_facts", "Next step: "),
    "verified_facts": ("verified_facts", ""),
    "failures": ("failures", ""),
    "unresolved_questions": ("unresolved_questions", ""),
}
ALIASES = {
    "facts": "findings",
    "questions": "open_questions",
    "files": "artifacts",
    "state": "current_state",
    "next_steps": "next_step",
    "user_requests": "requests",
}
TEXT_KEYS = (
    "text",
    "statement",
    "request",
    "decision",
    "finding",
    "error",
    "question",
    "path",
    "command",
    "summary",
    "content",
    "description",
)
ID_KEYS = ("source_ids", "sources", "source_id", "ids", "citations", "record_ids")
# the extra field of a section and how it joins the text
EXTRAS = {
    "decisions": (("reason", "why", "rationale"), "{text} — because {extra}"),
    "errors": (("fix", "resolution", "fixed_by"), "{text} — fix: {extra}"),
    "artifacts": (("action", "what"), "{extra}: {text}"),
}
_FENCE = re.compile(r"```[\w+.-]*[ \t]*\n?(.*?)```", re.S)
_BRACKETS = re.compile(r"\[([^\[\]\n]{1,400})\]")
ENTRY_SHARE = 3  # one entry takes at most 1/3 of the output bound


def read_answer(
    content: str, req: SummaryRequest, count: Callable[[str], int]
) -> tuple[SummaryDraft, dict[str, int]]:
    """The draft a model's answer gives for ``req``, and what was left out, by reason.

    Entries keep the answer's citations that name records of the segment; an entry with
    none left is dropped. The draft is trimmed to ``req.max_output_tokens`` as ``count``
    (the job's tokenizer) counts them:
    entries shortened from the middle, then the least needed dropped (``fit_draft``).
    Raises ``InvalidSummary`` only when no cited entry remains."""
    dropped: Counter[str] = Counter()
    data = _json_object(content, dropped)
    sections = _sections(data)
    facts: dict[str, list[Fact]] = {name: [] for name in FACT_FIELDS}
    for section, entries in sections.items():
        fact_field, prefix = SECTIONS[section]
        for entry in entries:
            fact = _fact(section, entry, req.source_ids, dropped)
            if fact is not None:
                if not fact.statement.lower().startswith(prefix.lower()):  # rolled up
                    fact = Fact(prefix + fact.statement, fact.source_ids)
                if fact not in facts[fact_field]:
                    facts[fact_field].append(fact)
    draft = SummaryDraft(
        **{name: tuple(fs) for name, fs in facts.items()},
        work_artifact_refs=_refs(sections.get("artifacts", []), data),
        observations=_strings(data.get("observations")),
    )
    if draft.is_empty():
        raise InvalidSummary(
            "the summarizer's answer holds no cited entry of the segment",
            reason=_nothing_reason(sections, dropped),
            dropped=dict(+dropped),
        )
    draft = _trimmed(draft, req.max_output_tokens, count, dropped)
    return draft, dict(+dropped)  # "+": the reasons that occurred


def _json_object(content: str, dropped: Counter[str]) -> dict[str, Any]:
    """The answer's JSON object: bare, fenced or inside prose; one cut off at the output
    limit keeps its complete entries. An object with sections wins over one without
    (an entry of a cut-off answer parses on its own)."""
    decoder = json.JSONDecoder()
    first: dict[str, Any] | None = None
    for text in [*(m.group(1) for m in _FENCE.finditer(content)), content]:
        for start in [m.start() for m in re.finditer(r"\{", text)][:20]:
            try:
                data, _ = decoder.raw_decode(text, start)
            except ValueError:
                continue
            if isinstance(data, dict) and _sections(data):
                return data
            if isinstance(data, dict) and first is None:
                first = data
    start = content.find("{")
    salvaged = _salvage(content[start:]) if start >= 0 else None
    if salvaged is not None and _sections(salvaged):
        dropped["cut_off"] += 1
        return salvaged
    if first is None:
        raise InvalidSummary("the summarizer's answer holds no JSON object", reason="unparseable")
    return first


def _salvage(text: str) -> dict[str, Any] | None:
    """A JSON object cut off mid-way, closed after its last complete value."""
    closers: list[str] = []
    cuts: list[tuple[int, str]] = []
    in_string = escaped = False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif in_string:
            escaped = ch == "\\"
            in_string = ch != '"'
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            closers.append("}" if ch == "{" else "]")
        elif ch in "}]" and closers:
            closers.pop()
            cuts.append((i + 1, "".join(reversed(closers))))
    for end, tail in reversed(cuts[-50:]):
        try:
            data = json.loads(text[:end] + tail)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return None


def _sections(data: dict[str, Any]) -> dict[str, list[Any]]:
    """Known sections of the answer (one level of wrapping allowed), each as a list."""
    keys = {_key(k) for k in data}
    if not keys & SECTIONS.keys():
        inner = [v for v in data.values() if isinstance(v, dict)]
        if len(inner) == 1:
            data = inner[0]
    out: dict[str, list[Any]] = {}
    for key, value in data.items():
        section = _key(key)
        if section not in SECTIONS:
            continue
        if value is None or value == "":
            value = []
        items = value if isinstance(value, list) else [value]
        out.setdefault(section, []).extend(items)
    return out


def _key(key: str) -> str:
    norm = re.sub(r"[\s-]+", "_", str(key).strip().lower())
    return ALIASES.get(norm, norm)


def _fact(section: str, entry: Any, segment: frozenset[str], dropped: Counter[str]) -> Fact | None:
    if isinstance(entry, str):
        entry = {"text": entry}
    if not isinstance(entry, dict):
        dropped["malformed"] += 1
        return None
    text = next((_text(entry[k]) for k in TEXT_KEYS if _text(entry.get(k))), "")
    ids = [i for k in ID_KEYS for i in _ids(entry.get(k))]
    inline, text = _inline_ids(text, segment)
    ids += inline
    if section in EXTRAS and text:
        keys, template = EXTRAS[section]
        extra = next((_text(entry[k]) for k in keys if _text(entry.get(k))), "")
        if extra:
            text = template.format(extra=extra, text=text)
    if not text:
        dropped["empty"] += 1
        return None
    kept = tuple(dict.fromkeys(i for i in ids if i in segment))
    if not kept:
        dropped["outside_segment" if ids else "uncited"] += 1
        return None
    dropped["foreign_ids"] += len(set(ids)) - len(kept)  # dropped from a kept entry
    return Fact(text, kept)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return ""


def _ids(value: Any) -> list[str]:
    if isinstance(value, str | int):
        value = re.split(r"[,\s]+", str(value))
    if not isinstance(value, list):
        return []
    return [
        str(v).strip().strip("[]") for v in value if isinstance(v, str | int) and str(v).strip()
    ]


def _inline_ids(text: str, segment: frozenset[str]) -> tuple[list[str], str]:
    """Ids cited inline (``… [rec_1, rec_2]``), and the text without those brackets."""
    ids: list[str] = []

    def cite(m: re.Match[str]) -> str:
        tokens = [t for t in re.split(r"[,\s]+", m.group(1)) if t]
        if not any(t in segment for t in tokens):
            return m.group(0)  # "[done]", "[0, 1]": words, not a citation
        ids.extend(tokens)
        return ""

    return ids, " ".join(_BRACKETS.sub(cite, text).split())


def _refs(artifacts: list[Any], data: dict[str, Any]) -> tuple[str, ...]:
    paths = [
        _text(a.get("text") or a.get("path")) if isinstance(a, dict) else _text(a)
        for a in artifacts
    ]
    paths += list(_strings(data.get("work_artifact_refs")))
    return tuple(dict.fromkeys(p for p in paths if p and " " not in p and len(p) <= 300))


def _strings(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    return tuple(t for t in (_text(v) for v in items) if t)


def _nothing_reason(sections: dict[str, list[Any]], dropped: Counter[str]) -> str:
    if not sections:
        return "missing_field"
    if dropped["outside_segment"] > dropped["uncited"]:
        return "unknown_source_id"
    return "uncited" if dropped["uncited"] else "empty"


def _trimmed(
    draft: SummaryDraft, bound: int, count: Callable[[str], int], dropped: Counter[str]
) -> SummaryDraft:
    """``draft`` within ``bound`` tokens: an entry over a third of it shortened from the
    middle, then ``fit_draft`` drops notes, artifacts and facts before decisions,
    failures and open questions."""
    per_entry = max(16, bound // ENTRY_SHARE)

    def clip(facts: tuple[Fact, ...]) -> tuple[Fact, ...]:
        out = []
        for fact in facts:
            short = _clip(fact.statement, per_entry, count)
            dropped["shortened"] += short != fact.statement
            out.append(dataclasses.replace(fact, statement=short))
        return tuple(out)

    clipped = SummaryDraft(
        clip(draft.verified_facts),
        clip(draft.decisions),
        clip(draft.failures),
        clip(draft.unresolved_questions),
        draft.work_artifact_refs,
        draft.observations,
    )
    draft, removed = fit_draft(clipped, bound, count)
    dropped["trimmed"] += removed
    return draft


def _clip(text: str, tokens: int, count: Callable[[str], int]) -> str:
    """``text`` shortened from the middle to about ``tokens``: its start and end stay."""
    out, keep = text, len(text)
    while count(out) > tokens and keep > 24:
        keep = min(keep - 1, int(keep * tokens / count(out) * 0.9))
        head = max(1, keep * 2 // 3)
        out = f"{text[:head]} … {text[len(text) - (keep - head) :]}"
    return out
