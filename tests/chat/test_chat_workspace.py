"""Turn-level tests of the workspace tools, through the gateway on the real chat stack.

Each test registers a workspace of its own (a fresh folder under the stack's workspace root)
and a session in it, scripts the model, and checks the stream, the stored session and the
repository on disk.
"""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
from workspace.sandboxing import processes_with

from chat.helpers import chat, new_workspace_session, of_type, text_of, thread_rows, user_message
from support.https_receiver import answer
from support.model_gateway import ToolCall, Turn
from support.stacks import MODEL, Stack
from support.waiting import eventually

READ = "mastra_workspace_read_file"
WRITE = "mastra_workspace_write_file"
EDIT = "mastra_workspace_edit_file"
RUN = "mastra_workspace_execute_command"
GET_OUTPUT = "mastra_workspace_get_process_output"
KILL = "mastra_workspace_kill_process"
LSP = "mastra_workspace_lsp_inspect"
READ_ONLY = [
    "mastra_workspace_read_file",
    "mastra_workspace_list_files",
    "mastra_workspace_grep",
    "mastra_workspace_file_stat",
]
READ_WRITE = [
    *READ_ONLY,
    "mastra_workspace_write_file",
    "mastra_workspace_edit_file",
    "mastra_workspace_mkdir",
    "mastra_workspace_delete",
    "mastra_workspace_execute_command",
    "mastra_workspace_get_process_output",
    "mastra_workspace_kill_process",
]


async def workspace_session(stack: Stack, client: httpx.AsyncClient, files: dict[str, str]) -> tuple[str, Path]:
    """A new registered workspace holding `files`, and a session in it."""
    name = f"repo-{uuid.uuid4().hex[:8]}"
    folder = stack.workspace_root / name
    folder.mkdir()
    for relative, content in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(content)
    return await new_workspace_session(client, name, "workspace test"), folder


def tool_names(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools", [])]


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_read_before_write(stack: Stack) -> None:
    async with stack.client() as client:
        session, repo = await workspace_session(stack, client, {"notes.txt": "one\n"})
        stack.models.push(
            # Overwriting an unread file is refused; a new file needs no read.
            Turn.call(ToolCall(WRITE, {"path": "notes.txt", "content": "two\n"}, id="w1")),
            Turn.call(ToolCall(WRITE, {"path": "new/fresh.txt", "content": "fresh\n"}, id="w2")),
            Turn.call(ToolCall(READ, {"path": "notes.txt"}, id="r1")),
            # Changed behind the agent's back (by a command) after the read: refused again.
            Turn.call(ToolCall(RUN, {"command": "echo changed > notes.txt"}, id="x1")),
            Turn.call(ToolCall(EDIT, {"path": "notes.txt", "old_string": "one", "new_string": "two"}, id="e1")),
            Turn.call(ToolCall(READ, {"path": "notes.txt"}, id="r2")),
            Turn.call(ToolCall(EDIT, {"path": "notes.txt", "old_string": "changed", "new_string": "two"}, id="e2")),
            # Its own write counts as a read: a second edit needs no new read.
            Turn.call(ToolCall(EDIT, {"path": "notes.txt", "old_string": "two", "new_string": "three"}, id="e3")),
            Turn.say("Done."),
        )
        chunks = await chat(client, session, "update the notes")
        errors = {e["toolCallId"]: e["errorText"] for e in of_type(chunks, "tool-output-error")}
        outputs = {o["toolCallId"]: o["output"] for o in of_type(chunks, "tool-output-available")}
        assert set(errors) == {"w1", "e1"}, errors
        assert "read it with mastra_workspace_read_file before overwriting or editing it" in errors["w1"]
        assert "changed since you read it; read it again" in errors["e1"]
        assert outputs["w2"]["created"] is True and (repo / "new" / "fresh.txt").read_text() == "fresh\n"
        assert outputs["x1"]["exitCode"] == 0
        assert "-changed\n+two" in outputs["e2"]["diff"]
        assert (repo / "notes.txt").read_text() == "three\n"

        # The ledger belongs to one agent run: the next turn must read again.
        stack.models.push(
            Turn.call(ToolCall(EDIT, {"path": "notes.txt", "old_string": "three", "new_string": "four"}, id="e4")),
            Turn.say("Could not."),
        )
        chunks = await chat(client, session, "once more")
        [error] = of_type(chunks, "tool-output-error")
        assert "before overwriting or editing it" in error["errorText"]
        assert (repo / "notes.txt").read_text() == "three\n"


async def test_roles_gate_the_tools_server_side(stack: Stack) -> None:
    async with stack.client() as client:
        session, repo = await workspace_session(stack, client, {"a.txt": "a\n"})
        stack.models.push(
            Turn.call(ToolCall("researcher", {"brief": "look at a.txt"}, id="d1")),
            # The researcher tries a write tool anyway (as a replayed or invented call would).
            Turn.call(ToolCall(WRITE, {"path": "a.txt", "content": "x"}, id="rw")),
            Turn.say("Read it."),
            Turn.call(ToolCall("implementer", {"brief": "change a.txt"}, id="d2")),
            Turn.say("Changed."),
            Turn.say("All done."),
        )
        await chat(client, session, "look, then change")
        supervisor, researcher, researcher_2, _, implementer, _ = stack.models.requests
        # Code inspection is every role's membership tool (listed first), read-only.
        assert [n for n in tool_names(supervisor) if n.startswith("mastra_")] == [LSP, *READ_WRITE]
        assert [n for n in tool_names(researcher) if n.startswith("mastra_")] == [LSP, *READ_ONLY]
        assert [n for n in tool_names(implementer) if n.startswith("mastra_")] == [LSP, *READ_WRITE]
        # Not offered, and refused all the same when called.
        [refusal] = [m["content"] for m in researcher_2["messages"] if m["role"] in ("tool", "user")][-1:]
        assert f"Unknown tool name: '{WRITE}'" in refusal, refusal
        assert (repo / "a.txt").read_text() == "a\n"

        # An /api/agents edit applies on the next run: the reviewer given no access gets no tool.
        patched = await client.patch("/api/agents/researcher", json={"workspaceAccess": "none"})
        assert patched.status_code == 200, patched.text
        try:
            stack.models.requests.clear()
            stack.models.push(
                Turn.call(ToolCall("researcher", {"brief": "look again"}, id="d3")),
                Turn.say("Nothing."),
                Turn.say("Ok."),
            )
            await chat(client, session, "look again")
            assert [n for n in tool_names(stack.models.requests[1]) if n.startswith("mastra_")] == []
        finally:
            await client.patch("/api/agents/researcher", json={"workspaceAccess": "read-only"})


async def test_a_hook_modify_pointing_a_write_outside_is_refused_by_the_tool(stack: Stack) -> None:
    async with stack.client() as client:
        session, repo = await workspace_session(stack, client, {})
        outside = repo.parent / f"{repo.name}-outside.txt"
        stack.receiver.script(
            "/pre-tool", answer("modify", replacement={"path": f"../{outside.name}", "content": "escaped"})
        )
        stack.models.push(
            Turn.call(ToolCall(WRITE, {"path": "inside.txt", "content": "fine"}, id="w1")),
            Turn.say("Tried."),
        )
        chunks = await chat(client, session, "write a file")
        [error] = of_type(chunks, "tool-output-error")
        assert "contains '..'" in error["errorText"]
        [pre] = stack.hook_requests("PreToolUse")
        assert pre["detail"]["toolName"] == WRITE
        assert not outside.exists() and not (repo / "inside.txt").exists()
        # An absolute path is refused the same way.
        stack.receiver.script("/pre-tool", answer("modify", replacement={"path": str(outside), "content": "x"}))
        stack.models.push(Turn.call(ToolCall(WRITE, {"path": "inside.txt", "content": "fine"})), Turn.say("Tried."))
        chunks = await chat(client, session, "again")
        assert "absolute path" in of_type(chunks, "tool-output-error")[0]["errorText"]
        assert not outside.exists()


CALC = "def add(a, b):\n    return a - b\n"
TEST_CALC = textwrap.dedent(
    """
    from calc import add


    def test_add():
        assert add(2, 3) == 5
    """
)


async def test_a_turn_reads_edits_and_runs_the_tests_in_the_sandbox(stack: Stack) -> None:
    async with stack.client() as client:
        session, repo = await workspace_session(stack, client, {"calc.py": CALC, "test_calc.py": TEST_CALC})
        stack.models.push(
            Turn.call(ToolCall(READ, {"path": "calc.py"}, id="read")),
            Turn.call(ToolCall(EDIT, {"path": "calc.py", "old_string": "a - b", "new_string": "a + b"}, id="edit")),
            Turn.call(ToolCall(RUN, {"command": "python -m pytest -q -p no:cacheprovider"}, id="test")),
            Turn.say("Fixed add(); the test passes."),
        )
        chunks = await chat(client, session, "fix add and run the tests")

        inputs = [(c["toolCallId"], c["toolName"]) for c in of_type(chunks, "tool-input-available")]
        assert inputs == [("read", READ), ("edit", EDIT), ("test", RUN)]
        outputs = {o["toolCallId"]: o["output"] for o in of_type(chunks, "tool-output-available")}
        assert of_type(chunks, "tool-output-error") == []
        assert outputs["read"]["path"] == "calc.py" and (outputs["read"]["startLine"], outputs["read"]["endLine"]) == (
            1,
            2,
        )
        assert "     2\t    return a - b" in outputs["read"]["content"]
        assert "-    return a - b\n+    return a + b" in outputs["edit"]["diff"]
        run = outputs["test"]
        assert run["exitCode"] == 0, run["output"]
        assert "1 passed" in run["output"]
        assert text_of(chunks) == "Fixed add(); the test passes."

        # The repository shows exactly that change.
        assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
        assert sorted(p.name for p in repo.iterdir()) == ["__pycache__", "calc.py", "test_calc.py"]

        # The stored thread holds the same tool parts as the stream, and the model-side calls.
        rows = await thread_rows(stack, session)
        assert [role for _, role, _ in rows] == ["user", "assistant"]
        assistant = rows[1][2]["ui"]
        parts = [
            (p["type"], p.get("toolCallId"), p.get("state"))
            for p in assistant["parts"]
            if p["type"].startswith("tool-")
        ]
        assert parts == [
            (f"tool-{READ}", "read", "output-available"),
            (f"tool-{EDIT}", "edit", "output-available"),
            (f"tool-{RUN}", "test", "output-available"),
        ]
        stored_run = next(p for p in assistant["parts"] if p.get("toolCallId") == "test")
        assert stored_run["input"] == {"command": "python -m pytest -q -p no:cacheprovider"}
        assert stored_run["output"]["exitCode"] == 0
        # The model saw the command's result.
        assert "1 passed" in tool_results(stack.models.requests[3])[-1]


async def test_a_vanished_workspace_directory_is_a_clear_tool_error(stack: Stack) -> None:
    async with stack.client() as client:
        session, repo = await workspace_session(stack, client, {"x.txt": "x"})
        (repo / "x.txt").unlink()
        repo.rmdir()
        stack.models.push(Turn.call(ToolCall(READ, {"path": "x.txt"}, id="r")), Turn.say("Gone."))
        chunks = await chat(client, session, "read x")
        [error] = of_type(chunks, "tool-output-error")
        assert "has no directory" in error["errorText"] and "does not exist" in error["errorText"]


async def test_health_reports_the_sandbox(stack: Stack) -> None:
    async with stack.client() as client:
        body = (await client.get("/api/health")).json()
    sandbox = body["components"]["sandbox"]
    assert sandbox["ok"] is True and sandbox["detail"].startswith("commands run with processes ≤ 256"), sandbox
    # The defaults: 2 GiB a command, 10 GiB a workspace.
    assert "memory ≤ 2048 MiB a command" in sandbox["detail"] and "workspace disk ≤ 10240 MiB" in sandbox["detail"]


async def test_background_processes_are_read_killed_and_end_with_the_turn(stack: Stack) -> None:
    kept = f"kept-{uuid.uuid4().hex[:8]}"
    process_id = ""

    def respond(body: dict[str, Any]) -> Turn:
        """Each step's call; the process id comes from the first result, as the model would read it."""
        nonlocal process_id
        results = tool_results(body)
        step = len(results)
        if step == 1:
            process_id = json.loads(results[0])["processId"]
        script = [
            Turn.call(ToolCall(RUN, {"command": "echo started; sleep 300", "background": True}, id="bg")),
            Turn.call(ToolCall(GET_OUTPUT, {"process_id": process_id, "wait_s": 0.5}, id="out")),
            Turn.call(ToolCall(KILL, {"process_id": process_id}, id="kill")),
            Turn.call(ToolCall(RUN, {"command": f"sleep 300 # {kept}", "background": True}, id="left")),
            Turn.say("Left one running."),
        ]
        return script[step]

    async with stack.client() as client:
        session, _ = await workspace_session(stack, client, {})
        stack.models.responder = respond
        chunks = await chat(client, session, "run things in the background")
    outputs = {o["toolCallId"]: o["output"] for o in of_type(chunks, "tool-output-available")}
    assert of_type(chunks, "tool-output-error") == []
    assert outputs["bg"]["running"] is True and outputs["bg"]["processId"] == process_id
    assert outputs["out"]["running"] is True and outputs["out"]["output"] == "started\n"
    assert outputs["kill"]["wasRunning"] is True and outputs["kill"]["exitCode"] is None
    assert outputs["left"]["running"] is True
    # The turn is over: the process it left running was killed with it.
    assert processes_with(kept) == []


async def test_a_command_is_killed_at_the_persisted_timeout(stack: Stack) -> None:
    async with stack.client() as client:
        session, _ = await workspace_session(stack, client, {})
        assert (await client.patch("/api/settings/agent-runtime", json={"commandTimeoutMs": 1000})).status_code == 200
        try:
            stack.models.push(
                Turn.call(ToolCall(RUN, {"command": "echo begun; sleep 30"}, id="slow")), Turn.say("Slow.")
            )
            chunks = await chat(client, session, "run the slow thing")
        finally:
            await client.patch("/api/settings/agent-runtime", json={"commandTimeoutMs": 120_000})
    [output] = of_type(chunks, "tool-output-available")
    result = output["output"]
    assert result["timedOut"] is True and result["exitCode"] is None
    assert result["output"] == "begun\n"
    assert 900 <= result["durationMs"] < 5000


async def test_a_cancelled_turn_kills_its_running_command(stack: Stack) -> None:
    marker = f"cancelled-{uuid.uuid4().hex[:8]}"
    async with stack.client() as client:
        session, _ = await workspace_session(stack, client, {})
        stack.models.push(Turn.call(ToolCall(RUN, {"command": f"sleep 300 # {marker}"}, id="long")), Turn.say("never"))
        body = {"id": session, "model": MODEL, "message": user_message("run the long thing")}
        async with client.stream("POST", "/api/chat", json=body) as response:
            assert response.status_code == 200
            turn_id = ""
            async for line in response.aiter_lines():
                if '"type":"start"' in line:
                    turn_id = orjson.loads(line.removeprefix("data: "))["messageMetadata"]["turnId"]
                if '"tool-input-available"' in line:
                    # The command is running in its sandbox (bubblewrap, its PID 1, the shell).
                    await eventually(lambda: len(processes_with(marker)) >= 3, within=10, what="the command to start")
                    break
            # A user cancels the turn: the command's whole process group is killed with it.
            cancelled = await client.post(f"/api/sessions/{session}/turns/{turn_id}/cancel")
            assert cancelled.status_code == 200, cancelled.text
        await eventually(lambda: processes_with(marker) == [], within=5, what="the command to be killed")
