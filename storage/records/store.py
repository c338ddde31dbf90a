"""The session processor's port to PostgreSQL for a batch of records: ``IngestStore``
(what a batch reads and writes) and its adapter ``PgIngestStore``. What control decisions
read and write, and both over one connection, is ``storage.processor_store`` (above this
package and ``storage.compaction``)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import asyncpg

from domain.planning.state import BatchPlan, SessionState
from storage.records import batch_sql, ingest, outcomes, session_states
from storage.records.outcomes import RefusedEvent
from storage.records.session_states import ExistingRecord


class IngestStore(Protocol):
    """What a batch of records reads and writes, in a transaction the processor opens.
    A nested ``transaction`` is a savepoint: what fails in it is undone alone."""

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        """A transaction, or a savepoint inside one."""

    async def open_sessions(self, session_ids: list[str]) -> set[str]:
        """The ids among ``session_ids`` that name an existing session."""

    async def blob_tokens(
        self, refs: list[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, str, int]]:
        """(space_id, sha256) -> (token_count, token_method, length) of the blobs each
        space stored (a space reads only its own)."""

    async def load_states(
        self,
        keys: dict[str, set[str]],
        operations: dict[str, set[tuple[str, str]]],
        scopes: dict[str, set[tuple[str, str | None]]],
    ) -> tuple[dict[str, SessionState], dict[tuple[str, str], ExistingRecord]]:
        """Lock and load the sessions of a batch and the records it already committed,
        with only the runs and threads the batch names (``scopes``)."""

    async def write_records(
        self,
        plan: BatchPlan,
        states: dict[str, SessionState],
        consumer: str,
        topic: str,
        offsets: dict[int, int] | None = None,
    ) -> None:
        """Write a planned part of a batch: records, runs, threads, outcomes and the
        view estimate (resource (de)activations: ``storage.processor_store``); with
        ``offsets``, the batch's tracking rows too (``write_offsets``), in the same
        round trip when the part writes anything."""

    async def write_offsets(self, consumer: str, topic: str, offsets: dict[int, int]) -> None:
        """The tracking rows: the batch is consumed up to ``offsets`` (effectively-once)."""

    async def record_refusals(self, refusals: Sequence[RefusedEvent]) -> set[tuple[str, str]]:
        """Remember why events were refused, each under its session only when that
        session is of the event's own space and actor (``storage.records.outcomes``);
        the (session_id, event_key) of those."""


class PgIngestStore:
    """``IngestStore`` over one asyncpg connection."""

    conn: asyncpg.Connection

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        tx: AbstractAsyncContextManager[Any] = self.conn.transaction()
        return tx

    async def load_states(
        self,
        keys: dict[str, set[str]],
        operations: dict[str, set[tuple[str, str]]],
        scopes: dict[str, set[tuple[str, str | None]]],
    ) -> tuple[dict[str, SessionState], dict[tuple[str, str], ExistingRecord]]:
        return await session_states.load_states(self.conn, keys, operations, scopes)

    async def write_records(
        self,
        plan: BatchPlan,
        states: dict[str, SessionState],
        consumer: str,
        topic: str,
        offsets: dict[int, int] | None = None,
    ) -> None:
        await ingest.write_plan(self.conn, plan, states, consumer, topic, offsets or {})

    async def write_offsets(self, consumer: str, topic: str, offsets: dict[int, int]) -> None:
        await batch_sql.write_offsets(self.conn, consumer, topic, offsets)

    async def open_sessions(self, session_ids: list[str]) -> set[str]:
        """The ids among ``session_ids`` that name an existing session."""
        conn = self.conn
        rows = await conn.fetch(
            "SELECT session_id FROM sessions WHERE session_id = ANY($1::text[])", session_ids
        )
        return {r["session_id"] for r in rows}

    async def blob_tokens(
        self, refs: list[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, str, int]]:
        """(space_id, sha256) -> (token_count, token_method, length) of the blobs among
        ``refs`` that their space stored (another space's hash is absent, found by
        the same key lookup as a hash nobody stored)."""
        conn = self.conn
        rows = await conn.fetch(
            "SELECT b.space_id, b.sha256, b.token_count, b.token_method, b.length FROM blobs b"
            " JOIN unnest($1::text[], $2::text[]) AS q(space_id, sha256)"
            " ON b.space_id = q.space_id AND b.sha256 = q.sha256",
            [space for space, _ in refs],
            [sha for _, sha in refs],
        )
        return {
            (r["space_id"], r["sha256"]): (r["token_count"], r["token_method"], r["length"])
            for r in rows
        }

    async def record_refusals(self, refusals: Sequence[RefusedEvent]) -> set[tuple[str, str]]:
        return await outcomes.record_refusals(self.conn, refusals)
