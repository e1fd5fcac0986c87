"""popagent's MCP server driven by the official MCP TypeScript SDK client (@modelcontextprotocol/sdk,
pinned in tests/mcp_client_ts/package-lock.json): Node runs tests/mcp_client_ts/client.mjs against
the stack's /mcp over real HTTP."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from support.model_gateway import Turn
from support.stacks import API_KEY, MODEL, Stack

CLIENT = Path(__file__).resolve().parents[1] / "mcp_client_ts" / "client.mjs"
TOOLS = ["chat", "get_session", "get_task", "list_agents", "list_sessions", "run_task", "search_docs"]


async def run_ts_client(stack: Stack, headers: dict[str, str], *prompt_and_model: str) -> dict[str, Any]:
    """What client.mjs printed: {connected, tools, chat, progress, session}, or the refusal it met."""
    process = await asyncio.create_subprocess_exec(
        "node",
        str(CLIENT),
        stack.url,
        json.dumps(headers),
        *prompt_and_model,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=90)
    except TimeoutError:
        process.kill()
        raise
    assert process.returncode == 0, stderr.decode()
    return json.loads(stdout)


@pytest.mark.parametrize(
    "headers", [{"authorization": f"Bearer {API_KEY}"}, {"x-popagent-key": API_KEY}], ids=["bearer", "x-popagent-key"]
)
async def test_the_typescript_client_lists_the_tools_and_chats_to_the_answer_with_progress(
    stack: Stack, headers: dict[str, str]
) -> None:
    reply = "The deploy finished and every check passed."
    stack.models.push(Turn.say(reply, chunk_size=5, chunk_delay_s=0.02))
    ran = await run_ts_client(stack, headers, "Did the deploy finish?", MODEL)
    assert ran["connected"] and sorted(ran["tools"]) == TOOLS
    assert not ran["chat"]["isError"], ran["chat"]["text"]
    outcome = json.loads(ran["chat"]["text"])
    assert (outcome["status"], outcome["answer"]) == ("completed", reply)
    # The reply arrived piece by piece as progress notifications, in order, counted up.
    assert len(ran["progress"]) > 1
    assert "".join(note["message"] for note in ran["progress"]) == reply
    values = [note["progress"] for note in ran["progress"]]
    assert values == sorted(set(values))
    assert not ran["session"]["isError"], ran["session"]["text"]
    assert "## User\n\nDid the deploy finish?\n\n## popagent\n\n" + reply in ran["session"]["text"]


@pytest.mark.parametrize(
    "headers",
    [{}, {"authorization": f"Bearer {API_KEY[:-1]}"}, {"x-popagent-key": API_KEY.upper()}],
    ids=["no-key", "wrong-bearer", "wrong-x-popagent-key"],
)
async def test_the_typescript_client_without_the_key_gets_401_and_no_tools(
    stack: Stack, headers: dict[str, str]
) -> None:
    ran = await run_ts_client(stack, headers)
    assert (ran["connected"], ran.get("status"), ran["tools"]) == (False, 401, None)
    assert "missing or wrong x-popagent-key" in ran["error"]
