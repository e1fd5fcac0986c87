"""A chat turn in which the scripted model inspects code: through the gateway, on the real stack.

The tool runs like every other (hooks, stream parts, the stored thread), against the
agent-runner's own language servers rooted at the session's workspace.
"""

from __future__ import annotations

import uuid

import httpx
from chat.helpers import chat, new_workspace_session, of_type

from lsp import fixture_repo
from support.https_receiver import answer
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack

LSP = "mastra_workspace_lsp_inspect"


async def fixture_session(stack: Stack, client: httpx.AsyncClient) -> str:
    name = f"lsp-{uuid.uuid4().hex[:8]}"
    fixture_repo.write(stack.workspace_root / name)
    return await new_workspace_session(client, name, "lsp test")


async def test_every_role_has_the_tool_and_a_turn_uses_it(stack: Stack) -> None:
    async with stack.client() as client:
        agents = (await client.get("/api/agents")).json()
        assert LSP in agents["knownTools"]
        roles = {agent["id"]: agent["tools"] for agent in agents["agents"]}
        assert all(LSP in roles[role] for role in ("popagent", "researcher", "implementer", "reviewer")), roles

        session = await fixture_session(stack, client)
        path, line, character = fixture_repo.PY_CALL
        # PreToolUse sees the call, and its replacement is what runs: the TypeScript call instead.
        ts_path, ts_line, ts_character = fixture_repo.TS_CALL
        replacement = {"operation": "hover", "path": ts_path, "line": ts_line, "character": ts_character}
        pre_answers = iter([answer("modify", replacement=replacement), answer("pass")])
        stack.receiver.script("/pre-tool", lambda request: next(pre_answers))
        stack.models.push(
            Turn.call(
                ToolCall(LSP, {"operation": "hover", "path": path, "line": line, "character": character}, id="h")
            ),
            Turn.call(ToolCall(LSP, {"operation": "diagnostics", "path": "../outside.py"}, id="x")),
            Turn.say("greet takes a name."),
        )
        chunks = await chat(client, session, "what does greet take?")

    [output] = of_type(chunks, "tool-output-available")
    assert output["toolCallId"] == "h"
    assert output["output"]["at"] == {"path": ts_path, "line": ts_line, "character": ts_character}
    assert "greet(name: string, times?: number): string" in output["output"]["hover"]
    [error] = of_type(chunks, "tool-output-error")
    assert error["toolCallId"] == "x" and "contains '..'" in error["errorText"]
    # The model read the answer (repository paths only, no host path).
    hover_result = stack.models.requests[1]["messages"][-1]["content"]
    assert "greet(name: string" in hover_result and str(stack.workspace_root) not in hover_result
    # The hooks saw it like every other tool.
    [pre, pre_failing] = stack.hook_requests("PreToolUse")
    assert (pre["detail"]["toolName"], pre["detail"]["arguments"]["path"]) == (LSP, path)
    assert pre_failing["detail"]["arguments"]["path"] == "../outside.py"
    [post] = stack.hook_requests("PostToolUse")
    assert post["detail"]["toolName"] == LSP
    assert {key: post["detail"]["arguments"][key] for key in replacement} == replacement
    [failure] = stack.hook_requests("PostToolUseFailure")
    assert failure["detail"]["toolName"] == LSP
