"""popagent_tasks."""
