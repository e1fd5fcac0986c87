"""Issue 41, finding 2, through the real stack: a model's command past the memory limit, a file past
the workspace's disk budget and a write into a full workspace are each stopped, the model reads
why, and /api/health says what binds a command on this machine."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from chat.helpers import chat, new_workspace_session, of_type, reset_for_chat
from support.model_gateway import ToolCall, Turn
from support.stacks import CHAT_HOOK_PATHS, Stack, StackSpec

RUN = "mastra_workspace_execute_command"
WRITE = "mastra_workspace_write_file"
MIB = 1024 * 1024

# One stack, on one worker, for the tests of this file.
pytestmark = pytest.mark.xdist_group("workspace-limits")
LIMITS_STACK = StackSpec(
    "workspace_limits",
    CHAT_HOOK_PATHS,
    frozenset({"gateway"}),
    runner_settings={"POPAGENT_SANDBOX_MEMORY_MB": "128", "POPAGENT_WORKSPACE_DISK_MB": "4"},
)


@pytest.fixture
async def stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    return await reset_for_chat(await started_stack(LIMITS_STACK))


def fresh_folder(stack: Stack) -> tuple[str, Path]:
    """A new folder under the stack's workspace root: its name and path."""
    name = f"repo-{uuid.uuid4().hex[:8]}"
    folder = stack.workspace_root / name
    folder.mkdir()
    return name, folder


def tool_outputs(chunks: list[Any]) -> list[Any]:
    return [chunk["output"] for chunk in of_type(chunks, "tool-output-available")]


async def test_a_command_past_the_memory_limit_is_stopped_and_the_model_reads_why(stack: Stack) -> None:
    async with stack.client() as client:
        name, _ = fresh_folder(stack)
        session = await new_workspace_session(client, name, "memory")
        allocate = 'python -c \'b = b"x" * (512 << 20); print("allocated")\''
        stack.models.push(Turn.call(ToolCall(RUN, {"command": allocate}, id="m")), Turn.say("Done."))
        chunks = await chat(client, session, "allocate")
    [output] = tool_outputs(chunks)
    assert output["exitCode"] != 0 and "allocated" not in output["output"], output
    if output.get("memoryLimitExceeded"):  # a memory cgroup: the kernel killed it
        assert "memory limit" in output["note"]
    else:  # RLIMIT_AS: the allocation failed
        assert "MemoryError" in output["output"], output


async def test_the_disk_budget_stops_a_growing_file_and_a_write_into_a_full_workspace(stack: Stack) -> None:
    async with stack.client() as client:
        name, folder = fresh_folder(stack)
        session = await new_workspace_session(client, name, "disk")
        stack.models.push(
            Turn.call(ToolCall(RUN, {"command": "head -c 16777216 /dev/zero > big"}, id="big")),
            Turn.call(ToolCall(RUN, {"command": "echo more >> big"}, id="more")),
            Turn.call(ToolCall(WRITE, {"path": "notes.txt", "content": "x" * 4096}, id="w")),
            Turn.call(ToolCall(RUN, {"command": "rm big && echo removed"}, id="rm")),
            Turn.call(ToolCall(WRITE, {"path": "notes.txt", "content": "x" * 4096}, id="w2")),
            Turn.say("Done."),
        )
        chunks = await chat(client, session, "fill it")
    big, more, removed, written = tool_outputs(chunks)
    # SIGXFSZ stopped `head` at the room left, and then the shell appending to a full workspace
    # (153 = 128 + SIGXFSZ).
    assert big["exitCode"] == 153 and more["exitCode"] == 153, (big, more)
    assert "diskBudgetExceeded" not in big and more["diskBudgetExceeded"] is True, (big, more)
    assert more["note"].startswith("the workspace was at its disk budget when the command started"), more
    [refused] = of_type(chunks, "tool-output-error")
    assert refused["toolCallId"] == "w" and "the workspace is at its disk budget" in refused["errorText"], refused
    assert removed["exitCode"] == 0 and "removed" in removed["output"], removed
    assert written["path"] == "notes.txt" and (folder / "notes.txt").read_text() == "x" * 4096
    assert not (folder / "big").exists()


async def test_health_says_what_binds_a_command_here(stack: Stack) -> None:
    async with stack.client() as client:
        body = (await client.get("/api/health")).json()
    sandbox = body["components"]["sandbox"]
    assert sandbox["ok"] is True
    assert sandbox["detail"].startswith("commands run with processes ≤ 256 ("), sandbox
    assert "memory ≤ 128 MiB a command (" in sandbox["detail"], sandbox
    assert sandbox["detail"].endswith("workspace disk ≤ 4 MiB (RLIMIT_FSIZE and a watch while commands run)"), sandbox
