-- Issue 37: every prepare stores its whole context for the gateway's final check (R10.5);
-- a long thread's consecutive contexts share all but their last messages, and at 10,000
-- records each write was ~1.2 MB (7.5 ms of the database's time and 2 ms of Prepare's a
-- prepare). A large context may now be stored as the bytes it adds to an earlier one of
-- its thread: ``base_id`` names that context (stored whole) and ``base_bytes`` how much of
-- its body comes first; ``body`` holds the rest. Readers rebuild the whole body in SQL
-- (storage/calls/prepared_body.py ``BODY``). Pruning keeps a context while another
-- younger than the retention names it as its base.
ALTER TABLE prepared_contexts ADD COLUMN base_id text, ADD COLUMN base_bytes integer;
CREATE INDEX prepared_contexts_base ON prepared_contexts (base_id) WHERE base_id IS NOT NULL;
