"""The fixed runtime policy of a contained self-update attempt.

It is code, not configuration: no prompt, hook, skill, learned overlay or approval rule can loosen
it. Every tool call is checked before `PreToolUse` and again on the arguments a hook rewrote
(`turn/capability.py`), so a hook can only make a call stricter. What it allows:

- tools from a fixed list (time, documentation search, recall, skills, the workspace tools, and the
  supervisor's delegations); everything else is refused, including memory mutation (`remember`),
  `useBrowserSecret`, the browser, the web tools and users' MCP servers;
- workspace paths that are not hidden or credential paths (`protected_path`);
- shell commands only when the command line is exactly one the repository declares
  (`.popagent/self-update.json` at the captured HEAD), run from an allowed folder;
- the reviewer: reading only.

It also records how each delegation ended: completion needs a successful implementer and reviewer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

IMPLEMENTER = "implementer"
REVIEWER = "reviewer"
SUPERVISOR = "popagent"

READ_TOOLS = frozenset(
    {
        "mastra_workspace_read_file",
        "mastra_workspace_list_files",
        "mastra_workspace_grep",
        "mastra_workspace_file_stat",
        "mastra_workspace_lsp_inspect",
    }
)
WRITE_TOOLS = frozenset(
    {
        "mastra_workspace_write_file",
        "mastra_workspace_edit_file",
        "mastra_workspace_mkdir",
        "mastra_workspace_delete",
    }
)
SHELL_TOOLS = frozenset({"mastra_workspace_execute_command"})
PROCESS_TOOLS = frozenset({"mastra_workspace_get_process_output", "mastra_workspace_kill_process"})
HARMLESS_TOOLS = frozenset({"getTime", "searchDocs", "recall", "skill", "skill_read", "skill_search"})
# Tools the runtime drops from every profile for the attempt (also refused by name should one remain).
REMOVED_TOOLS = frozenset({"remember", "useBrowserSecret", "bifrostNavigator", "webFetch", "webSearch"})

# Hidden or credential paths, matched on any path component.
_PROTECTED_NAMES = frozenset(
    {
        ".git",
        ".ssh",
        ".gnupg",
        ".aws",
        ".azure",
        ".kube",
        ".docker",
        ".netrc",
        ".npmrc",
        ".pypirc",
        ".git-credentials",
        ".gitconfig",
        ".gitmodules",
        ".gitattributes",
        ".popagent",
    }
)
_KEY_FILE = re.compile(
    r"^(?:id_(?:rsa|dsa|ecdsa|ed25519)(?:\.pub)?|.*\.(?:pem|key|p12|pfx|jks|keystore|asc|gpg)|credentials(?:\.json)?)$",
    re.IGNORECASE,
)


def protected_path(path: str) -> str | None:
    """Why an agent may not touch `path` (repository-relative) during self-update; None: allowed."""
    cleaned = path.strip().replace("\\", "/")
    parts = [part for part in PurePosixPath(cleaned).parts if part not in ("", ".", "/")]
    if any(part == ".." for part in parts):
        return "paths leading out of the repository are refused"
    lowered = [part.lower() for part in parts]
    for part in lowered:
        if part in _PROTECTED_NAMES:
            return f"{part} is a protected path"
        if part.startswith(".env"):
            return "environment files are protected"
        if _KEY_FILE.match(part):
            return "key and credential files are protected"
    if len(lowered) >= 2 and lowered[0] == ".github" and lowered[1] == "workflows":
        return ".github/workflows is protected"
    return None


# Argument names of the workspace tools that name a path or a glob.
_PATH_ARGUMENTS = ("path", "cwd", "include")


@dataclass
class Containment:
    """One self-update attempt's policy and the record of its delegations."""

    commands: frozenset[str]
    # agent id -> "completed" | "failed" | "denied", in order of ending (the last one counts).
    delegations: list[tuple[str, str]] = field(default_factory=list[tuple[str, str]])

    def delegated(self, agent_id: str, status: str) -> None:
        self.delegations.append((agent_id, status))

    def succeeded(self, agent_id: str) -> bool:
        return any(agent == agent_id and status == "completed" for agent, status in self.delegations)

    def refusal(
        self, agent_id: str, tool_name: str, arguments: Mapping[str, Any], specialists: frozenset[str]
    ) -> str | None:
        """Why the call may not run; None: it may (other gates still apply)."""
        if tool_name in REMOVED_TOOLS or tool_name.startswith("mcp__"):
            return f"{tool_name} is not available during self-update"
        if tool_name in specialists:
            return None if agent_id == SUPERVISOR else "specialists do not delegate"
        if tool_name in HARMLESS_TOOLS or tool_name in PROCESS_TOOLS:
            return None
        if tool_name not in READ_TOOLS | WRITE_TOOLS | SHELL_TOOLS:
            return f"{tool_name} is not on the self-update tool list"
        if agent_id == REVIEWER and tool_name not in READ_TOOLS:
            return "the reviewer reads only during self-update"
        for name in _PATH_ARGUMENTS:
            value = arguments.get(name)
            values = value if isinstance(value, list) else [value]
            for each in values:
                if isinstance(each, str) and each:
                    problem = protected_path(each)
                    if problem is not None:
                        return problem
        if "_raw" in arguments or "_value" in arguments:
            return "arguments that are not a JSON object are refused during self-update"
        if tool_name in SHELL_TOOLS:
            command = arguments.get("command")
            normalized = " ".join(command.split()) if isinstance(command, str) else ""
            if normalized not in self.commands:
                declared = ", ".join(sorted(self.commands)) or "none"
                return f"only the commands the repository declares run during self-update (declared: {declared})"
        return None
