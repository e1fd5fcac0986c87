"""Language servers for `mastra_workspace_lsp_inspect`: one manager per service, servers per workspace.

| module | what |
|---|---|
| `languages.py` | which server serves which files, and how it is started (pinned, installed, never fetched) |
| `session.py` | one running server, in the sandbox on the repository read-only: a pygls `LanguageClient`, its open documents, the files changed on disk since the last call |
| `manager.py` | lazy start, reuse across turns and agents, idle shutdown, restart after a crash, a bound |
| `inspection.py` | the operations of the tool on one repository: files read through the containment, bounded answers |
| `protocol.py` | the LSP types (lsprotocol) under one name |
| `locations.py` | server URIs to repository-relative locations, or library references without host paths |
"""
