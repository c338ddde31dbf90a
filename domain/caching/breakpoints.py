"""Where an Anthropic request puts its ``cache_control`` marks, and each mark's lifetime.
Pure.

Positions are block indexes in the order the provider caches them: each tool, then each
system block, then every content block of the messages. An agent loop only appends to
its conversation, so the request's last conversation block is marked: the next step's
request starts with the same blocks and, its own last mark being a few blocks further,
finds that entry through the lookback. When the lookback or more blocks were appended
since the previous model call's request ended (a step with many parallel tool results,
events appended without a model call), an intermediate mark goes within the lookback
after where that request ended, so the entry it wrote is still found, and where it can,
within the lookback before the last mark, so no mark is further than the lookback from
the entry before it. The stable prefixes are marked too (the end of tools and system, the
history summary): a new summary still finds them.

Lifetimes: the marks of the tool loop keep the 5-minute default — the next step comes
within seconds. With a longer lifetime on the profile (``1h``), the stable marks and the
end of the conversation before the newest user message (``turn_start``) carry it: a user
who comes back within the hour finds the conversation up to their question cached, and
only what lies between the entry read and those marks is written at the 1-hour premium.
A longer-lived mark never follows a shorter-lived one (the API refuses that order).

A mark on a prefix shorter than the model's minimum would cache nothing and is left out;
there are never more than four (the least useful, the end of tools and system, goes
first when five are wanted).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from domain.caching.rules import DEFAULT_TTL, LOOKBACK_BLOCKS, MAX_BREAKPOINTS, CacheRules


@dataclass(frozen=True)
class Anchors:
    """The block positions where a request's reusable prefixes end."""

    head: int | None = None  # the end of tools+system
    summary: int | None = None  # the history summary's last block
    turn_start: int | None = None  # the conversation's end before the newest user message
    end: int | None = None  # the conversation's last block (append-only)
    previous_end: int | None = None  # where the previous model call's request ended


class Mark(NamedTuple):
    position: int
    ttl: str  # a key of ``domain.caching.rules.CACHE_TTLS``


def intermediate(anchors: Anchors, markable: Callable[[int], bool]) -> int | None:
    """A mark between ``previous_end`` and ``end`` when ``end`` is as far as the lookback
    or further from it: within the lookback after ``previous_end`` (it finds that entry),
    and within the lookback before ``end`` where one such block exists (``end`` then
    finds it in the next request too), else the last block the window allows."""
    end, prev = anchors.end, anchors.previous_end
    if end is None or prev is None or end - prev < LOOKBACK_BLOCKS:
        return None
    window = [q for q in range(prev, min(prev + LOOKBACK_BLOCKS, end)) if markable(q)]
    reach = [q for q in window if end - q < LOOKBACK_BLOCKS]
    return reach[0] if reach else (window[-1] if window else None)


def place(
    anchors: Anchors,
    prefix_tokens: Sequence[int | None],
    rules: CacheRules,
    markable: Callable[[int], bool] = lambda _: True,
) -> tuple[Mark, ...]:
    """The marks, ascending by position: wanted in the order the conversation's end, the
    intermediate mark, the turn start (with a long lifetime only), the summary, the end
    of tools+system; each only if its prefix (``prefix_tokens[i]``: the tokens up to and
    including block ``i``; None when not known, then assumed long enough) reaches the
    model's minimum; at most ``MAX_BREAKPOINTS``. ``markable`` says which blocks may
    carry a mark (the anchors already do)."""
    long = rules.ttl != DEFAULT_TTL
    turn = anchors.turn_start if long else None
    wanted = [anchors.end, intermediate(anchors, markable), turn, anchors.summary, anchors.head]
    chosen: list[int] = []
    for pos in wanted:
        if pos is None or pos in chosen or len(chosen) == MAX_BREAKPOINTS:
            continue
        tokens = prefix_tokens[pos]
        if tokens is not None and tokens < rules.min_tokens:
            continue
        chosen.append(pos)
    lasting = [p for p in (anchors.head, anchors.summary, turn) if p in chosen]
    until = max(lasting) if long and lasting else -1
    return tuple(Mark(p, rules.ttl if p <= until else DEFAULT_TTL) for p in sorted(chosen))
