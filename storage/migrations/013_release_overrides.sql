-- Issue 14 / R17: a release keeps the agent's overrides as they were given beside the
-- frozen effective policy (``context_policy``). NULL for releases published before this
-- migration. Not part of the content hash: two override sets with the same effective
-- policy are the same release.
ALTER TABLE releases ADD COLUMN policy_overrides jsonb;
