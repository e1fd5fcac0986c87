-- The approval a running attempt's turn waits for (docs/approvals.md): which one, for which tool,
-- and since when. Set and cleared by the attempt's worker (fenced like every attempt write), and
-- cleared by every transition that ends the attempt, so only a live attempt shows one.

ALTER TABLE popagent_agent_tasks
    ADD COLUMN approval_wait_id text,
    ADD COLUMN approval_wait_tool text,
    ADD COLUMN approval_wait_since timestamptz,
    ADD CONSTRAINT popagent_agent_tasks_approval_wait CHECK (
        (approval_wait_id IS NULL AND approval_wait_tool IS NULL AND approval_wait_since IS NULL)
        OR (approval_wait_id IS NOT NULL AND approval_wait_tool IS NOT NULL AND approval_wait_since IS NOT NULL
            AND status IN ('running', 'cancelling'))
    );
