-- Issue 24: the execution frontier. A thread's plan, the session's constraints and the
-- task version are folded from their own records at every prepare and at every summary
-- commit (storage/frontier.py); this partial index keeps that a scan of those records
-- only, however long the session's history.
CREATE INDEX records_frontier ON records (session_id, session_sequence)
    WHERE kind IN ('plan_updated', 'constraint_set', 'constraint_retired',
                   'user_input', 'supplement');
