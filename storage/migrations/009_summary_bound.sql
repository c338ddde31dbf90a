-- Issue 9 (R11.2, R11.7, R11.8): what a summary kept verbatim on purpose, the bound it was
-- held to, and how a roll-up condensed its parent chain (null when none was needed).
ALTER TABLE summary_revisions
    ADD COLUMN IF NOT EXISTS retained_reference_ids text[] NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS bound_tokens bigint,
    ADD COLUMN IF NOT EXISTS rollup jsonb;
