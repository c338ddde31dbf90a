-- R11.4/R11.5: what the text rules did to a summary's entries (framed or marked, with the
-- rule, the entry and its sources): diagnostics for the inspector, never a reason to fail.
ALTER TABLE summary_revisions
    ADD COLUMN IF NOT EXISTS text_rules jsonb NOT NULL DEFAULT '[]'::jsonb;
