"""Workspace tools, named with Mastra's workspace registry keys so hook matchers match unchanged.

They are not part of an agent's tool membership: which of them an agent gets follows its
persisted workspace access (`popagent_agents.workspace_access`), decided here on the server
and never by a prompt:

- `read-write`: every tool, the shell included;
- `read-only`: read, list, grep and stat, no shell;
- `none`: no workspace tool.

| module | tools |
|---|---|
| `file_tools.py` | `mastra_workspace_read_file`, `_write_file`, `_edit_file`, `_list_files`, `_grep`, `_file_stat`, `_mkdir`, `_delete` |
| `shell_tools.py` | `mastra_workspace_execute_command`, `_get_process_output`, `_kill_process` |
"""

from __future__ import annotations

from pydantic_ai import Tool

from popagent_agent_runner.context.deps import TurnDeps
from popagent_agent_runner.tools.workspace import file_tools, shell_tools

READ_ONLY_TOOLS: tuple[Tool[TurnDeps], ...] = (
    file_tools.READ_FILE,
    file_tools.LIST_FILES,
    file_tools.GREP,
    file_tools.FILE_STAT,
)
READ_WRITE_TOOLS: tuple[Tool[TurnDeps], ...] = (
    *READ_ONLY_TOOLS,
    file_tools.WRITE_FILE,
    file_tools.EDIT_FILE,
    file_tools.MKDIR,
    file_tools.DELETE,
    shell_tools.EXECUTE_COMMAND,
    shell_tools.GET_PROCESS_OUTPUT,
    shell_tools.KILL_PROCESS,
)
BY_ACCESS: dict[str, tuple[Tool[TurnDeps], ...]] = {
    "none": (),
    "read-only": READ_ONLY_TOOLS,
    "read-write": READ_WRITE_TOOLS,
}
