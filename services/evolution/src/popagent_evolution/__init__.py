"""popagent_evolution."""
