-- A PreToolUse handler may answer `ask` (the call needs a person's approval), and every
-- handler run is audited with its outcome, so the outcome check must admit it.
ALTER TABLE popagent_hook_runs DROP CONSTRAINT popagent_hook_runs_outcome_check;
ALTER TABLE popagent_hook_runs ADD CONSTRAINT popagent_hook_runs_outcome_check
    CHECK (outcome IN ('pass', 'deny', 'modify', 'continue', 'ask'));
