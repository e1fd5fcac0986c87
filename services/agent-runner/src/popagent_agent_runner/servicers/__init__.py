"""The gRPC servicers: thin, they translate messages and errors and call the layers below.

| module | does |
|---|---|
| `chat.py` | `AgentRunnerService`: Chat and the long-term memories |
| `tasks.py` | `AgentRunnerTaskService`: a task attempt's turn streamed back |
| `state.py` | `AgentRunnerStateService`: sessions, agents, workspaces and settings |
| `skills.py` | `AgentRunnerSkillsService`: Agent Skills |
| `attachments.py` | `AttachmentsService`: files attached to a session's messages |
| `channels.py` | `AgentRunnerChannelsService`: channel connections, deliveries, posts and cancels |
| `mcp_servers.py` | `AgentRunnerMcpService`: users' MCP servers and their connection test |
| `documents.py` | `DocumentsService`: documentation indexing and search |
| `memory.py` | `SessionMemoryService`: a session's observational memory, read-only |
| `messages.py` | a typed record as the proto message a servicer answers with, by field name |
| `session_reads.py` | a stored session as one GetSession answer carries it: within the gRPC message limit |
"""
