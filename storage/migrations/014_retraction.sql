-- Issue 15: record_retracted. A retraction's operation_id is its target's record_id, so
-- records_operation_once already makes "retracted at most once". This index serves the
-- per-record "is it retracted" checks of views and read-back, and the session's
-- retraction count in the view epoch (storage/retraction.py).
CREATE INDEX records_retractions ON records (session_id, operation_id)
    WHERE kind = 'record_retracted';
