"""The workspace shell: commands under bubblewrap in the turn's repository (`workspace/sandbox.py`).

Only agents with read-write workspace access get these. A foreground command answers with
its exit code, duration and bounded output; `background: true` answers with a process id
for `mastra_workspace_get_process_output` and `mastra_workspace_kill_process`. Background
processes belong to the turn and are killed when it ends; every command is killed at its
timeout and when the turn is cancelled.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field
from pydantic_ai import RunContext, Tool, ToolFailed

from popagent_agent_runner.context.deps import TurnDeps
from popagent_agent_runner.tools.workspace.file_tools import contained, turn_hands
from popagent_agent_runner.workspace.paths import Repository, WorkspaceRefusal
from popagent_agent_runner.workspace.sandbox import (
    MAX_TIMEOUT_S,
    CommandResult,
    SandboxProcess,
    SandboxRefused,
    SandboxUnavailable,
)


def _cwd(repo: Repository, relative: str) -> str:
    with repo.directory(relative or ".") as folder:
        return folder.path


def _result(result: CommandResult, cwd: str) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "command": result.command,
        "cwd": cwd,
        "exitCode": result.exit_code,
        "durationMs": result.duration_ms,
        "output": result.output,
        "omittedBytes": result.omitted_bytes,
    }
    if result.timed_out:
        answer["timedOut"] = True
    if result.killed:
        answer["killed"] = True
    if result.memory_exceeded:
        answer["memoryLimitExceeded"] = True
        answer["note"] = "a process of the command was killed: it passed the command's memory limit"
    if result.disk_budget_exceeded:
        answer["diskBudgetExceeded"] = True
        answer["note"] = "killed: the workspace passed its disk budget; remove files before writing more"
    elif result.disk_full:
        answer["diskBudgetExceeded"] = True
        answer["note"] = (
            "the workspace was at its disk budget when the command started: files could be removed "
            "or truncated, none could grow"
        )
    return answer


async def execute_command(
    ctx: RunContext[TurnDeps],
    command: Annotated[str, Field(min_length=1, max_length=16_000, description="a /bin/sh command line")],
    cwd: Annotated[str, Field(max_length=4096, description="working folder relative to the repository root")] = ".",
    timeout_s: Annotated[
        float | None, Field(gt=0, le=MAX_TIMEOUT_S, description="seconds before the command is killed")
    ] = None,
    background: Annotated[bool, Field(description="start it and return a process id at once")] = False,
) -> dict[str, Any]:
    """Run a shell command in the repository, in a sandbox without network access.

    Only the repository (plus /tmp and $HOME, both private and temporary) is writable, within
    the workspace's disk budget; each command has a memory limit. Output is cut to its first 16 KiB and last 48 KiB. Use `background: true` for servers or
    long jobs, then mastra_workspace_get_process_output and mastra_workspace_kill_process.
    """
    hands = turn_hands(ctx, write=True)
    repo = hands.repo()
    relative = await contained(_cwd, repo, cwd)
    folder = repo.root if relative == "." else repo.root.joinpath(*relative.split("/"))
    timeout = hands.timeout(timeout_s)
    # The sandbox mounts the directory this descriptor holds, whatever its path leads to by now.
    try:
        with repo.root_fd() as root_fd:
            if not background:
                return _result(await hands.sandbox.run(root_fd, repo.root, folder, command, timeout), relative)
            process = await hands.sandbox.start(root_fd, repo.root, folder, command)
    except (WorkspaceRefusal, SandboxUnavailable, SandboxRefused) as exc:
        raise ToolFailed(str(exc)) from None
    try:
        process_id = hands.keep(process, timeout)
    except Exception as exc:
        raise ToolFailed(str(exc)) from None
    return {"processId": process_id, "command": command, "cwd": relative, "running": True, "timeoutS": timeout}


async def get_process_output(
    ctx: RunContext[TurnDeps],
    process_id: Annotated[str, Field(max_length=64, description="the id execute_command returned")],
    wait_s: Annotated[float, Field(ge=0, le=60, description="seconds to wait for the process to exit first")] = 0,
) -> dict[str, Any]:
    """Output so far (bounded like a command's) and state of a background process of this turn."""
    hands = turn_hands(ctx, write=True)
    process = await contained(hands.process, process_id)
    if wait_s and process.running:
        await _wait_quietly(process, wait_s)
    result = process.result()
    answer = _result(result, "")
    answer.pop("cwd")
    answer["processId"] = process_id
    answer["running"] = process.running
    return answer


async def _wait_quietly(process: SandboxProcess, wait_s: float) -> None:
    await process.exited(wait_s)


async def kill_process(
    ctx: RunContext[TurnDeps],
    process_id: Annotated[str, Field(max_length=64, description="the id execute_command returned")],
) -> dict[str, Any]:
    """Kill a background process of this turn (its whole process group) and return its final output."""
    hands = turn_hands(ctx, write=True)
    process = await contained(hands.process, process_id)
    was_running = process.running
    process.kill()
    await _wait_quietly(process, 5)
    answer = _result(process.result(), "")
    answer.pop("cwd")
    answer["processId"] = process_id
    answer["wasRunning"] = was_running
    return answer


EXECUTE_COMMAND: Tool[TurnDeps] = Tool(execute_command, name="mastra_workspace_execute_command")
GET_PROCESS_OUTPUT: Tool[TurnDeps] = Tool(get_process_output, name="mastra_workspace_get_process_output")
KILL_PROCESS: Tool[TurnDeps] = Tool(kill_process, name="mastra_workspace_kill_process")
