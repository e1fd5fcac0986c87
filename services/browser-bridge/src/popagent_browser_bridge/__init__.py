"""popagent_browser_bridge."""
