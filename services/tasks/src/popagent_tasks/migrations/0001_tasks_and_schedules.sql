-- Durable background tasks, their progress, and cron schedules.
--
-- Provenance (`source`, `workspace_id`) and what a task runs (prompt, model, session,
-- schedule, parent lineage) never change after insert: a trigger refuses it, so no
-- retry, recovery or resolution path can rewrite them by mistake.

CREATE TABLE popagent_agent_schedules (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    source text NOT NULL CHECK (source IN ('user', 'self-update')),
    workspace_id text NOT NULL CHECK (workspace_id <> ''),
    name text NOT NULL,
    prompt text NOT NULL,
    model text NOT NULL,
    session_id text NOT NULL,
    cron text NOT NULL,
    -- NULL only on rows written before the one-time timezone/next-run backfill
    -- (popagent_tasks.backfill); every write since sets both.
    timezone text,
    next_run_at timestamptz,
    enabled boolean NOT NULL,
    max_attempts integer NOT NULL CHECK (max_attempts BETWEEN 1 AND 20),
    last_tick timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One system (self-update) schedule per workspace; user schedules are unconstrained.
CREATE UNIQUE INDEX popagent_agent_schedules_self_update_slot
    ON popagent_agent_schedules (workspace_id) WHERE source = 'self-update';
CREATE INDEX popagent_agent_schedules_due ON popagent_agent_schedules (next_run_at) WHERE enabled;

CREATE TABLE popagent_agent_tasks (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    -- 'remediation' tasks are created by the runtime after a terminal failure and never
    -- create remediation of their own.
    kind text NOT NULL CHECK (kind IN ('task', 'remediation')),
    status text NOT NULL CHECK (
        status IN ('queued', 'running', 'cancelling', 'completed', 'failed', 'cancelled', 'dead-letter')
    ),
    source text NOT NULL CHECK (source IN ('user', 'self-update')),
    workspace_id text NOT NULL CHECK (workspace_id <> ''),
    prompt text NOT NULL,
    model text NOT NULL,
    session_id text NOT NULL,
    -- Kept as plain ids (no foreign keys): lineage outlives a deleted schedule or parent.
    schedule_id uuid,
    tick timestamptz,
    parent_task_id uuid,
    -- The attempt number is the fencing token: every claim increments it, and every
    -- heartbeat, progress entry and transition names the attempt it belongs to.
    attempt_count integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL DEFAULT 3 CHECK (max_attempts BETWEEN 1 AND 20),
    -- When a queued task becomes due; cleared once an operator resolves the task.
    next_attempt_at timestamptz DEFAULT now(),
    claimed_by text,
    turn_id uuid,
    trace_id text,
    started_at timestamptz,
    heartbeat_at timestamptz,
    finished_at timestamptz,
    last_error_class text,
    last_error text,
    dead_lettered_at timestamptz,
    outcome text,
    resolution text,
    resolved_at timestamptz,
    cancel_requested_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT popagent_agent_tasks_attempts CHECK (attempt_count BETWEEN 0 AND max_attempts),
    -- Any number of scheduler replicas may materialize the same tick: one row wins.
    CONSTRAINT popagent_agent_tasks_schedule_tick UNIQUE (schedule_id, tick)
);

CREATE INDEX popagent_agent_tasks_due ON popagent_agent_tasks (next_attempt_at, id) WHERE status = 'queued';
CREATE INDEX popagent_agent_tasks_live ON popagent_agent_tasks (heartbeat_at) WHERE status IN ('running', 'cancelling');
CREATE INDEX popagent_agent_tasks_recent ON popagent_agent_tasks (created_at DESC, id);
-- At most one remediation per failed task, however many times the failure is observed.
CREATE UNIQUE INDEX popagent_agent_tasks_one_remediation
    ON popagent_agent_tasks (parent_task_id) WHERE kind = 'remediation';

CREATE TABLE popagent_agent_task_progress (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id uuid NOT NULL REFERENCES popagent_agent_tasks (id) ON DELETE CASCADE,
    attempt integer NOT NULL,
    kind text NOT NULL,
    message text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX popagent_agent_task_progress_task ON popagent_agent_task_progress (task_id, id);

CREATE FUNCTION popagent_agent_tasks_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.source IS DISTINCT FROM OLD.source
        OR NEW.workspace_id IS DISTINCT FROM OLD.workspace_id
        OR NEW.kind IS DISTINCT FROM OLD.kind
        OR NEW.prompt IS DISTINCT FROM OLD.prompt
        OR NEW.model IS DISTINCT FROM OLD.model
        OR NEW.session_id IS DISTINCT FROM OLD.session_id
        OR NEW.schedule_id IS DISTINCT FROM OLD.schedule_id
        OR NEW.tick IS DISTINCT FROM OLD.tick
        OR NEW.parent_task_id IS DISTINCT FROM OLD.parent_task_id THEN
        RAISE EXCEPTION 'task provenance and work are immutable' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

-- `UPDATE OF` keeps the trigger off the hot path: claims, heartbeats and transitions
-- never name these columns.
CREATE TRIGGER popagent_agent_tasks_immutable
    BEFORE UPDATE OF source, workspace_id, kind, prompt, model, session_id, schedule_id, tick, parent_task_id
    ON popagent_agent_tasks FOR EACH ROW EXECUTE FUNCTION popagent_agent_tasks_immutable();

CREATE FUNCTION popagent_agent_schedules_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.source IS DISTINCT FROM OLD.source OR NEW.workspace_id IS DISTINCT FROM OLD.workspace_id THEN
        RAISE EXCEPTION 'schedule provenance is immutable' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER popagent_agent_schedules_immutable
    BEFORE UPDATE OF source, workspace_id ON popagent_agent_schedules
    FOR EACH ROW EXECUTE FUNCTION popagent_agent_schedules_immutable();
