"""Old rows are deleted in rounds until one comes back short (issue 13: retention)."""

from __future__ import annotations

from typing import Any

from storage.calls.batches import delete_in_batches


class _Pool:
    def __init__(self, rounds: list[int | None]) -> None:
        self.rounds = rounds
        self.calls: list[tuple[Any, ...]] = []

    async def fetchval(self, sql: str, *args: Any) -> int | None:
        self.calls.append(args)
        return self.rounds.pop(0)


async def test_rounds_go_on_while_full_and_stop_at_a_short_one() -> None:
    pool = _Pool([3, 3, 1, 3])
    assert await delete_in_batches(pool, "DELETE", 60.0, 3) == 7  # type: ignore[arg-type]
    assert pool.calls == [(60.0, 3)] * 3 and pool.rounds == [3]


async def test_nothing_to_delete_is_one_round() -> None:
    pool = _Pool([None])
    assert await delete_in_batches(pool, "DELETE", 1.0, 100) == 0  # type: ignore[arg-type]
    assert len(pool.calls) == 1
