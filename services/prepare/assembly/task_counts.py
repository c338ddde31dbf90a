"""Prepare's task counts (R11.6) as last read, so that a read counts only the inputs
since (``storage.records.thread_frontier``): each thread's own count, continued by the
thread's next read, and each session's inherited inputs through a run's snapshot, where
the first read of a later run's main thread starts. Without them a long thread's
inputs, or a long session's at every new question, were all counted again."""

from __future__ import annotations

from storage.records.thread_frontier import TaskCount

Thread = tuple[str, str, str]  # session, run, instance


class TaskCounts:
    def __init__(self, limit: int) -> None:
        self.limit = limit  # sessions kept: past it they are forgotten (counted again)
        self._threads: dict[Thread, TaskCount] = {}
        self._sessions: dict[str, TaskCount] = {}  # ``through``: the snapshot

    def of(self, thread: Thread) -> TaskCount | None:
        """The thread's count as last read."""
        return self._threads.get(thread)

    def start(self, thread: Thread, through: int | None) -> TaskCount | None:
        """What a read of ``thread`` continues: its own last count, or for a main thread
        read first (``through``: its run's snapshot) the session's inherited inputs
        counted through that snapshot or before."""
        own = self._threads.get(thread)
        if own is not None or through is None:
            return own
        kept = self._sessions.get(thread[0])
        return kept if kept is not None and kept.through <= through else None

    def read(self, thread: Thread, counted: TaskCount, through: int | None = None) -> None:
        """``counted`` was read for ``thread`` (a main thread: ``through`` its snapshot);
        its inherited inputs, when it counted them, serve the session's later runs."""
        self._threads[thread] = counted
        if through is None or counted.inherited is None:
            return
        kept = self._sessions.get(thread[0])
        if kept is not None and kept.through > through:
            return  # a resumed run's older snapshot: the later count serves more runs
        if len(self._sessions) > self.limit:
            self._sessions.clear()
        self._sessions[thread[0]] = TaskCount(through, counted.inherited)

    def forget(self, thread: Thread) -> None:
        self._threads.pop(thread, None)
