"""popagent_hooks."""
