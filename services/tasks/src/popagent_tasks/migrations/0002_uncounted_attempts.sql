-- Attempts that ended through no fault of their own (the worker or agent-runner shut down
-- while they ran) are released to the queue without counting against max_attempts. The
-- attempt number stays monotonic, because it is each attempt's fencing token; what counts
-- is attempt_count - uncounted_attempts.

ALTER TABLE popagent_agent_tasks ADD COLUMN uncounted_attempts integer NOT NULL DEFAULT 0
    CHECK (uncounted_attempts >= 0);
ALTER TABLE popagent_agent_tasks DROP CONSTRAINT popagent_agent_tasks_attempts;
ALTER TABLE popagent_agent_tasks ADD CONSTRAINT popagent_agent_tasks_attempts
    CHECK (attempt_count - uncounted_attempts BETWEEN 0 AND max_attempts);
