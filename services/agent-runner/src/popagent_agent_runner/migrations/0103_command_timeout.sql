-- The workspace shell's default command timeout (agent-runtime setting). No database
-- default: data migration 0007 gives the existing row its value once; the service checks
-- the range (settings_rules) and this CHECK is the last line.
ALTER TABLE popagent_agent_runtime_settings
    ADD COLUMN command_timeout_ms integer CHECK (command_timeout_ms BETWEEN 1000 AND 600000);
