"""popagent_agent_runner."""
