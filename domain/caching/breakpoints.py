"""Where an Anthropic request puts its ``cache_control`` marks. Pure.

Positions are block indexes in the order the provider caches them: each tool, then each
system block, then every content block of the messages. An agent loop only appends to
its conversation, so the request's last conversation block is marked: the next step's
request starts with the same blocks and, its own last mark being a few blocks further,
finds that entry through the lookback. When the lookback or more blocks were appended
since the previous model call's request ended (a step with many parallel tool results,
events appended without a model call), an intermediate mark goes within the lookback
after where that request ended, so the entry it wrote is still found, and where it can,
within the lookback before the last mark, so no mark is further than the lookback from
the entry before it. The stable prefixes are marked too (the
end of tools and system, the history summary): a new summary or an expired conversation
entry still finds them. A mark on a prefix shorter than the model's minimum would cache
nothing and is left out; there are never more than four.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from domain.caching.rules import LOOKBACK_BLOCKS, MAX_BREAKPOINTS


@dataclass(frozen=True)
class Anchors:
    """The block positions where a request's reusable prefixes end."""

    stable: tuple[int, ...] = ()  # the end of tools+system, the summary's last block
    end: int | None = None  # the conversation's last block (append-only)
    previous_end: int | None = None  # where the previous model call's request ended


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
    min_tokens: int,
    markable: Callable[[int], bool] = lambda _: True,
) -> tuple[int, ...]:
    """The marked positions, ascending: the conversation's end, the intermediate mark,
    then the stable ones, each only if its prefix (``prefix_tokens[i]``: the tokens up to
    and including block ``i``; None when not known, then assumed long enough) reaches
    ``min_tokens``; at most ``MAX_BREAKPOINTS``, the first ones in that order kept.
    ``markable`` says which blocks may carry a mark (the anchors already do)."""
    wanted = [anchors.end, intermediate(anchors, markable), *anchors.stable]
    marks: list[int] = []
    for pos in wanted:
        if pos is None or pos in marks or len(marks) == MAX_BREAKPOINTS:
            continue
        tokens = prefix_tokens[pos]
        if tokens is not None and tokens < min_tokens:
            continue
        marks.append(pos)
    return tuple(sorted(marks))
