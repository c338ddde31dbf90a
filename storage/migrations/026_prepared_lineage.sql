-- Issue 39 item 3: a compaction's summarizer call may fork the agent's last request of
-- the thread (services/compaction/fork.py), so it reads the covered history from the
-- provider's prompt cache. Each prepared context names its purpose and its lineage
-- ('main' for a session's main thread, across runs, or the child instance id), and the
-- compaction service reads a thread's newest action context in one indexed query
-- (storage/calls/prepared_contexts.py ``last_action``). Rows written before this
-- migration have neither: a job then sends the summarizer's own request.
ALTER TABLE prepared_contexts ADD COLUMN purpose text, ADD COLUMN lineage text;
CREATE INDEX prepared_contexts_thread ON prepared_contexts (session_id, lineage, created_at DESC)
    WHERE purpose = 'action';
