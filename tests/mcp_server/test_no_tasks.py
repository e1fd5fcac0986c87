"""What a 2025-11-25 client that wants the Tasks extension meets at /mcp (docs/interop.md, "Long turns"):
the `mcp` SDK (2.3.0) serves no task methods, so the server declares no `tasks` capability and no tool
task support, answers a task-augmented `chat` with its plain result once the turn ended (progress
notifications on the way), and `tasks/get` is an unknown method. Spoken as raw JSON-RPC over HTTP,
because the SDK's own client has no task requests either."""

from __future__ import annotations

import json
from typing import Any

import httpx

from mcp_server.helpers import BEARER, HANDSHAKE
from support.model_gateway import Turn
from support.stacks import MODEL, Stack

HEADERS = {
    **BEARER,
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": HANDSHAKE,
}
METHOD_NOT_FOUND = -32601


def messages_of(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a response: its JSON body, or each `data:` event of its SSE stream."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        return [response.json()]
    return [json.loads(line[len("data:") :]) for line in response.text.splitlines() if line.startswith("data:")]


async def rpc(client: httpx.AsyncClient, request_id: int, method: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    response = await client.post(
        "/mcp", json={"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}, headers=HEADERS
    )
    return messages_of(response)


async def test_a_task_augmented_chat_is_answered_in_full_and_tasks_get_is_unknown(stack: Stack) -> None:
    reply = "All twelve services are healthy."
    stack.models.push(Turn.say(reply, chunk_size=8, chunk_delay_s=0.02))
    async with httpx.AsyncClient(base_url=stack.url, timeout=60.0) as client:
        [initialized] = await rpc(
            client,
            1,
            "initialize",
            {
                "protocolVersion": HANDSHAKE,
                "capabilities": {"tasks": {"requests": {"sampling": {"createMessage": {}}}}},
                "clientInfo": {"name": "tasks-client", "version": "1"},
            },
        )
        assert initialized["result"]["protocolVersion"] == HANDSHAKE
        assert "tasks" not in initialized["result"]["capabilities"]

        [listed] = await rpc(client, 2, "tools/list", {})
        assert all("execution" not in tool for tool in listed["result"]["tools"]), listed

        *progress, answered = await rpc(
            client,
            3,
            "tools/call",
            {
                "name": "chat",
                "arguments": {"prompt": "Are the services healthy?", "model": MODEL},
                "task": {"ttl": 60_000},
                "_meta": {"progressToken": "turn-1"},
            },
        )
        # The turn's text came as progress, then the whole result: no CreateTaskResult (`task`) first.
        assert "".join(note["params"].get("message", "") for note in progress) == reply
        assert {note["method"] for note in progress} == {"notifications/progress"}
        result = answered["result"]
        assert "task" not in result
        outcome = json.loads(result["content"][0]["text"])
        assert (outcome["status"], outcome["answer"]) == ("completed", reply)

        for request_id, method in enumerate(("tasks/get", "tasks/result", "tasks/cancel", "tasks/list"), start=4):
            [unknown] = await rpc(client, request_id, method, {"taskId": "any"})
            assert unknown["error"]["code"] == METHOD_NOT_FOUND, (method, unknown)
