"""Users' MCP servers as agent tools (docs/interop.md, "Users' MCP servers as agent tools").

| module | does |
|---|---|
| `store.py` | the servers and their agent grants (popagent_mcp_servers), checked before they are stored |
| `tokens.py` | the servers' bearer tokens in the secrets service |
| `oauth.py` | OAuth 2.1 servers: discovery, client registration, PKCE authorization, tokens kept and refreshed |
| `connection.py` | one held MCP session per server, reconnected with backoff; every call bounded |
| `stdio.py` | a stdio server run in the sandbox, JSON-RPC over its stdin and stdout |
| `toolbox.py` | a turn's `mcp__<server>__<tool>` tools by agent, and the connection test |
| `results.py` | a tool result as the model reads it: text, images and resources, bounded |
"""
