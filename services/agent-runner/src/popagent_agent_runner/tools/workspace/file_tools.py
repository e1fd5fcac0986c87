"""The workspace's file tools: contained file operations (`workspace/files.py`) on the turn's repository.

Each call checks the calling agent's persisted workspace access again (a tool that was not
offered is refused all the same), runs its operation in a worker thread and answers a
refusal as a failed tool result the model reads. Reads record the content hash in the agent
run's ledger (`TurnDeps.file_reads`); writes and edits of an existing file need it current.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any, ParamSpec, TypeVar

from pydantic import Field
from pydantic_ai import RunContext, Tool, ToolFailed

from popagent_agent_runner.context.deps import TurnDeps
from popagent_agent_runner.context.hands import TurnHands
from popagent_agent_runner.workspace import files
from popagent_agent_runner.workspace.paths import WorkspaceRefusal

P = ParamSpec("P")
R = TypeVar("R")

Path = Annotated[
    str, Field(min_length=1, max_length=4096, description="path relative to the repository root, e.g. 'src/app.py'")
]
Folder = Annotated[str, Field(max_length=4096, description="folder relative to the repository root; '.' is the root")]


def turn_hands(ctx: RunContext[TurnDeps], *, write: bool) -> TurnHands:
    """The turn's workspace, if this agent's persisted access allows the tool and its repository opened."""
    deps = ctx.deps
    access = deps.workspace_access
    if access == "none" or (write and access != "read-write"):
        raise ToolFailed(
            f"{deps.agent_id} has {access} workspace access: this tool is not available to it"
            + ("; describe the change instead" if access == "read-only" else "")
        )
    hands = deps.turn.hands
    if hands is None:
        raise ToolFailed("this turn has no workspace")
    if hands.repository is None:
        # Not registered, outside the root or missing when the turn began: every tool says so.
        raise ToolFailed(hands.problem)
    return hands


async def contained(operation: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    try:
        return await asyncio.to_thread(operation, *args, **kwargs)
    except WorkspaceRefusal as exc:
        raise ToolFailed(str(exc)) from None


async def within_disk_budget(hands: TurnHands, growth: int) -> None:
    """A write that may add `growth` bytes fails when the workspace would pass its disk budget."""
    repo = hands.repo()
    try:
        with repo.root_fd() as root_fd:
            await hands.sandbox.disk_budget.make_room(root_fd, str(repo.root), growth)
    except WorkspaceRefusal as exc:
        raise ToolFailed(str(exc)) from None


async def read_file(
    ctx: RunContext[TurnDeps],
    path: Path,
    offset: Annotated[int, Field(ge=1, description="first line to show (1-based)")] = 1,
    limit: Annotated[int | None, Field(ge=1, le=files.READ_MAX_LINES, description="lines to show")] = None,
) -> dict[str, Any]:
    """Read a text file of the repository, with line numbers.

    At most 2,000 lines or 256 KiB per call; a longer file ends with "truncated, continue at
    line N": call again with that offset. Read a file before you edit or overwrite it.
    """
    hands = turn_hands(ctx, write=False)
    result = await contained(files.read_file, hands.repo(), path, offset, limit)
    ctx.deps.file_reads[result.path] = result.sha256
    answer: dict[str, Any] = {
        "path": result.path,
        "startLine": result.start_line,
        "endLine": result.end_line,
        "totalLines": result.total_lines,
        "content": result.content,
    }
    if result.next_line:
        answer["nextLine"] = result.next_line
    return answer


async def write_file(
    ctx: RunContext[TurnDeps],
    path: Path,
    content: Annotated[str, Field(max_length=files.MAX_FILE_BYTES, description="the complete new file content")],
) -> dict[str, Any]:
    """Create a file or replace its whole content (missing folders are created).

    An existing file must have been read in this run, and not changed since.
    Prefer mastra_workspace_edit_file for changes to part of a file.
    """
    hands = turn_hands(ctx, write=True)
    await within_disk_budget(hands, len(content.encode()))
    result = await contained(files.write_file, hands.repo(), path, content, ctx.deps.file_reads)
    ctx.deps.file_reads[result.path] = result.sha256
    return {"path": result.path, "created": result.created, "bytes": result.bytes, "diff": result.diff}


async def edit_file(
    ctx: RunContext[TurnDeps],
    path: Path,
    old_string: Annotated[
        str, Field(min_length=1, max_length=files.MAX_FILE_BYTES, description="exact text to replace")
    ],
    new_string: Annotated[str, Field(max_length=files.MAX_FILE_BYTES, description="the replacement text")],
    replace_all: Annotated[bool, Field(description="replace every occurrence instead of exactly one")] = False,
) -> dict[str, Any]:
    """Replace exact text in a file that was read in this run.

    `old_string` must match exactly (whitespace included) and only once unless `replace_all`;
    a miss answers with the closest lines. Answers with the unified diff of the change.
    """
    hands = turn_hands(ctx, write=True)
    # The most the edit can add: each replacement may grow the file by the difference.
    await within_disk_budget(hands, max(0, len(new_string.encode()) - len(old_string.encode())))
    result = await contained(
        files.edit_file, hands.repo(), path, old_string, new_string, replace_all, ctx.deps.file_reads
    )
    ctx.deps.file_reads[result.path] = result.sha256
    return {"path": result.path, "replacements": result.replacements, "diff": result.diff}


async def list_files(
    ctx: RunContext[TurnDeps],
    path: Folder = ".",
    depth: Annotated[int, Field(ge=1, le=files.LIST_MAX_DEPTH, description="levels of folders to descend")] = 2,
) -> dict[str, Any]:
    """List files and folders of the repository as a tree (hides .git, respects .gitignore)."""
    hands = turn_hands(ctx, write=False)
    listing = await contained(files.list_files, hands.repo(), path or ".", depth)
    return {
        "path": listing.path,
        "entries": [{"path": entry.path, "type": entry.type, "size": entry.size} for entry in listing.entries],
        "truncated": listing.truncated,
    }


async def grep(
    ctx: RunContext[TurnDeps],
    pattern: Annotated[
        str,
        Field(
            min_length=1,
            max_length=1000,
            description="RE2 regular expression: Python's syntax without backreferences or lookaround; \\z ends the text",
        ),
    ],
    path: Folder = ".",
    include: Annotated[
        str | None,
        Field(
            max_length=500,
            description=f"glob of files to search, e.g. '*.py' or 'src/**/*.{{ts,tsx}}' (at most {files.MAX_INCLUDE_GLOBS} "
            "after {a,b} expansion)",
        ),
    ] = None,
    max_matches: Annotated[int, Field(ge=1, le=files.GREP_MAX_MATCHES)] = 100,
) -> dict[str, Any]:
    """Search file contents with a regular expression; matches come back as `path:line: text`.

    The expression is RE2's (linear time): like Python's `re` but with no backreferences
    (`\\1`) and no lookaround (`(?=`, `(?<=`, ...); `^` and `$` match at each line.
    Skips .git, ignored and binary files.
    """
    hands = turn_hands(ctx, write=False)
    found = await contained(files.grep, hands.repo(), pattern, path or ".", include, max_matches)
    answer: dict[str, Any] = {
        "matches": list(found.matches),
        "filesSearched": found.files_searched,
        "truncated": found.truncated,
    }
    if found.note:
        answer["note"] = found.note
    return answer


async def file_stat(ctx: RunContext[TurnDeps], path: Folder) -> dict[str, Any]:
    """Type, size, mode and modification time of a file or folder (a symbolic link is described, not followed)."""
    hands = turn_hands(ctx, write=False)
    found = await contained(files.file_stat, hands.repo(), path or ".")
    answer: dict[str, Any] = {
        "path": found.path,
        "type": found.type,
        "size": found.size,
        "mode": found.mode,
        "modified": found.modified,
    }
    if found.link_target:
        answer["linkTarget"] = found.link_target
    return answer


async def mkdir(ctx: RunContext[TurnDeps], path: Path) -> dict[str, Any]:
    """Create a folder (and any missing parents)."""
    hands = turn_hands(ctx, write=True)
    return {"path": await contained(files.make_directory, hands.repo(), path), "created": True}


async def delete(ctx: RunContext[TurnDeps], path: Path) -> dict[str, Any]:
    """Delete a file, a symbolic link or an empty folder. Never the repository root or .git."""
    hands = turn_hands(ctx, write=True)
    deleted = await contained(files.delete, hands.repo(), path)
    ctx.deps.file_reads.pop(deleted, None)
    return {"path": deleted, "deleted": True}


READ_FILE: Tool[TurnDeps] = Tool(read_file, name="mastra_workspace_read_file")
WRITE_FILE: Tool[TurnDeps] = Tool(write_file, name="mastra_workspace_write_file")
EDIT_FILE: Tool[TurnDeps] = Tool(edit_file, name="mastra_workspace_edit_file")
LIST_FILES: Tool[TurnDeps] = Tool(list_files, name="mastra_workspace_list_files")
GREP: Tool[TurnDeps] = Tool(grep, name="mastra_workspace_grep")
FILE_STAT: Tool[TurnDeps] = Tool(file_stat, name="mastra_workspace_file_stat")
MKDIR: Tool[TurnDeps] = Tool(mkdir, name="mastra_workspace_mkdir")
DELETE: Tool[TurnDeps] = Tool(delete, name="mastra_workspace_delete")
