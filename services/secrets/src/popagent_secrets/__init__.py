"""popagent_secrets."""
