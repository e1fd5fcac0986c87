-- A handler's secret is optional (signed when configured, unsigned otherwise), so each row
-- says whether its request carried a `webhook-signature`. Rows written before this held
-- only signed requests (a secret was required); new rows must say which.
ALTER TABLE popagent_hook_runs ADD COLUMN signed boolean NOT NULL DEFAULT true;
ALTER TABLE popagent_hook_runs ALTER COLUMN signed DROP DEFAULT;
