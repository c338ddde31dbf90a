-- Issue 13: render states are pruned by age (services/prepare/retention.py), like
-- prepared contexts; the index keeps each pruning round from scanning the table.
CREATE INDEX IF NOT EXISTS render_states_saved_at ON render_states (saved_at);
