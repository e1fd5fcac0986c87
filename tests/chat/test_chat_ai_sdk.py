"""The real AI SDK client (`ai`'s Chat, which useChat wraps) reads a real turn; what it rebuilds is what was stored."""

from __future__ import annotations

from typing import Any

from chat.helpers import new_session, recorded_turn, thread_rows
from support.ai_sdk_client import run_ai_sdk_chat
from support.model_gateway import ToolCall, Turn
from support.stacks import API_KEY, Stack


async def run_client(url: str, session_id: str, text: str) -> dict[str, Any]:
    return await run_ai_sdk_chat(url, API_KEY, session_id, text)


async def test_the_ai_sdk_client_rebuilds_exactly_the_stored_assistant_message(stack: Stack) -> None:
    stack.models.push(
        Turn.call(ToolCall("getTime", {"time_zone": "UTC"}, id="call-t")),
        Turn.call(ToolCall("reviewer", {"brief": "Check the time."}, id="call-r")),
        Turn.say("The time checks out."),
        Turn.say("It is noon, and the reviewer agrees.", chunk_size=3),
    )
    async with stack.client() as client:
        session = await new_session(client)
    result = await run_client(stack.url, session, "what time is it?")

    assert (result["status"], result["errors"]) == ("ready", [])
    user, assistant = result["messages"]
    rows = await thread_rows(stack, session)
    assert [role for _, role, _ in rows] == ["user", "assistant"]
    assert rows[0][2]["ui"] == user
    assert rows[1][2]["ui"] == assistant
    assert [part["type"] for part in assistant["parts"]] == [
        "step-start",
        "tool-getTime",
        "step-start",
        "tool-reviewer",
        "data-agentActivity",
        "step-start",
        "text",
    ]
    assert assistant["parts"][-1] == {"type": "text", "text": "It is noon, and the reviewer agrees.", "state": "done"}
    assert assistant["metadata"]["turnId"] and assistant["metadata"]["usage"]["outputTokens"] > 0


async def test_the_ai_sdk_client_shows_a_provider_failure_as_an_error(stack: Stack) -> None:
    stack.models.push(Turn.fail(503, "maintenance window"))
    async with stack.client() as client:
        session = await new_session(client)
    result = await run_client(stack.url, session, "hi")
    assert result["status"] == "error"
    assert result["errors"] == [
        "The model provider is unavailable (HTTP 503): maintenance window. "
        "Send the message again; if it keeps failing, pick another model."
    ]
    _, assistant = await recorded_turn(stack, session)
    assert assistant["metadata"]["failure"] == result["errors"][0]
