"""An in-memory ``storage.compaction.jobs.CompactionJobs``, a history builder, a request
consumer and a summarizer that can be held mid-call, for unit tests of the compaction
worker, its request loop and its concurrent consumer loop."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiokafka import ConsumerRecord, TopicPartition

from domain.compaction.drafts import SummaryRequest, SummaryResult
from domain.compaction.gateway import SummaryGateway
from domain.context.rendering import RecordView
from domain.frontier import Frontier, Plan
from domain.policy.context_policy import ContextPolicy
from storage.compaction.jobs import ParentSummary, SavedOperation
from tests.unit.fakes.publisher import FakePublisher

SESSION = "ses_1"


def history(runs: int, session_id: str = SESSION, tokens: int = 20) -> list[RecordView]:
    """``runs`` question runs on their main threads (``run_k``/``ins_k``), each: the
    question, an assistant message calling one tool, its result, the answer; every
    record counts ``tokens``."""
    out: list[RecordView] = []

    def add(run: int, kind: str, text: str, payload: dict[str, object]) -> None:
        seq = len(out) + 1
        rid = f"rec_{seq}"
        out.append(
            RecordView(rid, seq, f"run_{run}", f"ins_{run}", kind, "user", text, payload, tokens)
        )

    for k in range(1, runs + 1):
        call = {"call_id": f"call_{k}", "name": "grep", "arguments_json": f'{{"q": "q{k}"}}'}
        add(k, "user_input", f"question {k}: where is handler {k} defined?", {})
        add(k, "assistant_message", f"searching for handler {k}", {"tool_calls": [call]})
        result = f"src/handlers/h{k}.py:12: def handler_{k}():"
        add(k, "tool_outcome", result, {"call_id": f"call_{k}", "name": "grep", "status": "ok"})
        add(k, "assistant_message", f"handler {k} is in src/handlers/h{k}.py", {})
    return out


@dataclass
class FakeCompactionJobs:
    """Keeps operations, statuses and summaries in dicts; ``records`` is the session.

    ``arrives_first``: an outcome a concurrent delivery of the same job saves between
    this delivery's check and its own save (the insert then loses the race).
    ``watch``: a publisher whose message count is recorded at every save, so a test can
    assert that nothing was published before the outcome was saved.
    """

    records: list[RecordView] = field(default_factory=list)
    policy: ContextPolicy = field(default_factory=ContextPolicy)
    plan: Plan = field(default_factory=Plan)  # the job's thread's current plan (issue 24)
    declared: tuple[str, ...] = ()  # its constraint texts
    statuses: dict[str, str] = field(default_factory=dict)
    operations: dict[str, SavedOperation] = field(default_factory=dict)
    parents: dict[str, ParentSummary] = field(default_factory=dict)
    epoch: str = "0:0"
    arrives_first: SavedOperation | None = None
    watch: FakePublisher | None = None
    published_at_save: list[int] = field(default_factory=list)
    fail_next: list[Exception] = field(default_factory=list)
    reads: list[tuple[str, int, int]] = field(default_factory=list)  # (what, after, upto)

    def _raise_if_failing(self) -> None:
        if self.fail_next:
            raise self.fail_next.pop(0)

    async def job_status(self, job_id: str) -> str | None:
        self._raise_if_failing()
        return self.statuses.get(job_id)

    async def saved_outcome(self, job_id: str) -> bytes | None:
        op = self.operations.get(job_id)
        return op.outcome if op else None

    async def save_outcome(self, op: SavedOperation) -> bytes:
        self._raise_if_failing()
        if self.watch is not None:
            self.published_at_save.append(len(self.watch.sent))
        if self.arrives_first is not None:
            self.operations.setdefault(self.arrives_first.job_id, self.arrives_first)
            self.arrives_first = None
        return self.operations.setdefault(op.job_id, op).outcome

    async def parent_summary(self, summary_id: str | None) -> ParentSummary | None:
        return self.parents.get(summary_id) if summary_id else None

    async def session_policy(self, session_id: str) -> ContextPolicy:
        return self.policy

    async def revocation_epoch(self, session_id: str) -> str:
        return self.epoch

    async def current_frontier(self, session_id: str, run_id: str, instance_id: str) -> Frontier:
        return Frontier(self.plan, declared=self.declared)

    def _main(self, r: RecordView) -> bool:
        return r.instance_id == f"ins_{(r.run_id or '_').split('_')[-1]}"

    def _through(self, run_id: str) -> int:
        """The run's snapshot: everything before its question."""
        first = min((r.session_sequence for r in self.records if r.run_id == run_id), default=1)
        return first - 1

    def _inherited(self, after: int, through: int, covered: frozenset[str]) -> list[RecordView]:
        return [
            r
            for r in self.records
            if after < r.session_sequence <= through
            and self._main(r)
            and r.record_id not in covered
        ]

    async def inherited_view(
        self, session_id: str, run_id: str, instance_id: str, covered: frozenset[str]
    ) -> tuple[list[RecordView], int]:
        through = self._through(run_id)
        self.reads.append(("inherited", 0, through))
        if instance_id != f"ins_{run_id.split('_')[-1]}":
            return [], through  # a child thread inherits nothing (R13.1)
        return self._inherited(0, through, covered), through

    async def inherited_after(
        self, session_id: str, run_id: str, instance_id: str, after: int, covered: frozenset[str]
    ) -> tuple[list[RecordView], int] | None:
        through = self._through(run_id)
        self.reads.append(("inherited", after, through))
        if instance_id != f"ins_{run_id.split('_')[-1]}" or through < after:
            return None
        return self._inherited(after, through, covered), through

    async def thread_view(
        self, session_id: str, run_id: str, instance_id: str, after: int, upto: int
    ) -> list[RecordView]:
        self.reads.append(("thread", after, upto))
        return [
            r
            for r in self.records
            if r.run_id == run_id
            and r.instance_id == instance_id
            and after < r.session_sequence <= upto
        ]

    async def covered_records(
        self, session_id: str, ids: frozenset[str], max_tokens: int
    ) -> list[RecordView] | None:
        found = [r for r in self.records if r.record_id in ids]
        return None if sum(r.token_count for r in found) > max_tokens else found


class FakeRequestConsumer:
    """A ``services.compaction.consume.RequestConsumer`` over in-memory partitions.

    ``log`` holds each partition's messages (offset = index); fetching starts at
    ``start`` (a restarted consumer resumes from the committed offsets) and every commit
    is recorded in ``commits``."""

    def __init__(
        self,
        log: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]],
        start: dict[TopicPartition, int] | None = None,
    ) -> None:
        self.log = log
        self.position = {tp: (start or {}).get(tp, 0) for tp in log}
        self.committed: dict[TopicPartition, int] = dict(start or {})
        self.commits: list[dict[TopicPartition, int]] = []

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
        left = max_records if max_records is not None else 1 << 30
        out: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = {}
        for tp, msgs in self.log.items():
            take = msgs[self.position[tp] : self.position[tp] + left]
            if take:
                out[tp] = take
                self.position[tp] += len(take)
                left -= len(take)
        await asyncio.sleep(0 if out else 0.001)  # an idle poll yields, like a real one
        return out

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.commits.append(dict(offsets))
        self.committed.update(offsets)

    def assignment(self) -> set[TopicPartition]:
        return set(self.log)

    def highwater(self, partition: TopicPartition) -> int | None:
        return len(self.log[partition])


def request_record(
    tp: TopicPartition, offset: int, value: bytes, session_id: str
) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        tp.topic, tp.partition, offset, 0, 0, session_id.encode(), value, None, 5, len(value), ()
    )


class HeldGateway:
    """A summarizer whose calls for the jobs in ``held`` wait until ``release`` is set;
    ``ops`` lists every call's model operation id (``<job>:model:<i>``)."""

    name = "held"

    def __init__(self, inner: SummaryGateway, held: frozenset[str] = frozenset()) -> None:
        self.inner = inner
        self.held = held
        self.release = asyncio.Event()
        self.waiting: set[str] = set()
        self.ops: list[str] = []

    async def summarize(self, req: SummaryRequest) -> SummaryResult:
        self.ops.append(req.model_operation_id)
        job = req.model_operation_id.split(":")[0]
        if job in self.held:
            self.waiting.add(job)
            await self.release.wait()
        return await self.inner.summarize(req)
