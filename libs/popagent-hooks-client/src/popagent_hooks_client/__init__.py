"""popagent_hooks_client: the caller side of the hooks service (the client and the event rules)."""
