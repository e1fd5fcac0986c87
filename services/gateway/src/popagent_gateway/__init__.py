"""popagent_gateway."""
