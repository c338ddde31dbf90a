-- Issue 37: "was this observation checked already?" (its trigger report by event key) is
-- asked at every budget observation, under the lineage's lock (storage/compaction/state.py).
-- With only the (session_id, report_id) index it read every report of the session: one a
-- prepare, so a long session's thousands at each call.
CREATE INDEX IF NOT EXISTS trigger_reports_event ON trigger_reports (session_id, event_key);
