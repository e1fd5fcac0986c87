"""Web search tools: `webSearch` through the self-hosted SearXNG JSON API."""
