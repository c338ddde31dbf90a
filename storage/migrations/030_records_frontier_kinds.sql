-- Issue 37: the frontier read at every prepare (storage/records/frontier.py) asks three
-- things of a thread's records: its latest plan update, its constraints and its task count.
-- records_frontier (018) held all five kinds in sequence order, so each of the three read
-- every user input of the session to find its own kind: at 10,000 records, 6.5 ms of
-- every prepare. Keyed by kind first, the plan and the constraints are ranges of their own
-- kinds (a few rows), and the task count reads only user inputs and supplements, from the
-- index alone (the columns that place a record in a thread are included).
CREATE INDEX IF NOT EXISTS records_frontier_kinds
    ON records (session_id, kind, session_sequence)
    INCLUDE (run_id, instance_id, visibility)
    WHERE kind IN ('plan_updated', 'constraint_set', 'constraint_retired',
                   'user_input', 'supplement');
DROP INDEX IF EXISTS records_frontier;
