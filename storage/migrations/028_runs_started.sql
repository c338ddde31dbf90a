-- Issue 37: "did a run start after this one's snapshot?" is asked at every prepare and
-- every trigger check (storage/compaction/view_state.py, summaries.py); with only the
-- (session_id, run_id) key it read every run of the session, a long session's thousands
-- at each call. The inspection pages' runs in start order read it too.
CREATE INDEX IF NOT EXISTS runs_started ON runs (session_id, started_sequence);
