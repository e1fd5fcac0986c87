-- Human tool approvals (docs/approvals.md).
-- An agent's tool approval policy: a JSON array of rules (allow, ask or deny by tool or tool group,
-- with optional argument conditions); empty allows every tool the agent has.
ALTER TABLE popagent_agents ADD COLUMN tool_approval jsonb NOT NULL DEFAULT '[]'
    CHECK (jsonb_typeof(tool_approval) = 'array');

-- One approval per tool call that asked. The call's arguments are stored redacted (as hook payloads
-- are); the call that runs is the one in the turn's progress. `execution` makes an approved call run
-- at most once: a runner claims it (not_started -> started) before running it and stores its outcome
-- (finished); a runner that takes the turn over finds the claim and never runs the call again.
CREATE TABLE popagent_approvals (
    id text PRIMARY KEY,
    session_id text NOT NULL,
    turn_id text NOT NULL,
    tool_call_id text NOT NULL,
    agent_id text NOT NULL,
    tool_name text NOT NULL,
    arguments jsonb NOT NULL,
    reason text NOT NULL,
    asked_by text NOT NULL,
    state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'approved', 'denied', 'expired')),
    scope text CHECK (scope IN ('once', 'session')),
    answered_by text,
    answer_reason text,
    created_at timestamptz NOT NULL DEFAULT now(),
    answered_at timestamptz,
    expires_at timestamptz NOT NULL,
    execution text NOT NULL DEFAULT 'not_started' CHECK (execution IN ('not_started', 'started', 'finished')),
    -- The finished call's result as the model saw it: {"ok": <json>} or {"error": "<text>"}.
    outcome jsonb,
    UNIQUE (turn_id, tool_call_id),
    CHECK ((state = 'pending') = (answered_at IS NULL)),
    CHECK (execution = 'not_started' OR state = 'approved')
);
CREATE INDEX popagent_approvals_pending ON popagent_approvals (created_at DESC) WHERE state = 'pending';
CREATE INDEX popagent_approvals_session ON popagent_approvals (session_id, created_at DESC);

-- "Allow for this session": the tool no longer asks in that session until the grant is revoked.
CREATE TABLE popagent_approval_grants (
    session_id text NOT NULL,
    tool_name text NOT NULL,
    granted_by text NOT NULL,
    approval_id text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, tool_name)
);

-- A running turn that waits for an approval says since when (its status stays 'running': it still
-- holds its session and its lease, and is shown as waiting).
ALTER TABLE popagent_turns ADD COLUMN waiting_since timestamptz;
