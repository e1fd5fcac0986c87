"""An agent's persisted profile is read for every run: an edit of its instructions, its tools or its model
(PATCH /api/agents/:id) applies on its next run, the supervisor's and a specialist's alike, on whichever
agent-runner worker takes the turn, and undoing the edit applies on the run after."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx

from chat.helpers import chat, new_session
from support.model_gateway import ToolCall, Turn
from support.stacks import MODEL, Stack

OTHER_MODEL = "cx/gpt-5.3-codex-spark"


def system_text(request: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "system")


def tool_names(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools", [])]


@contextlib.asynccontextmanager
async def agent_edited(client: httpx.AsyncClient, agent: str, **changes: Any) -> AsyncIterator[dict[str, Any]]:
    """The agent's profile edited for the block (the edited profile yielded), then restored."""
    [before] = [a for a in (await client.get("/api/agents")).json()["agents"] if a["id"] == agent]
    edited = await client.patch(f"/api/agents/{agent}", json=changes)
    assert edited.status_code == 200, edited.text
    try:
        yield edited.json()
    finally:
        restored = await client.patch(f"/api/agents/{agent}", json={key: before[key] for key in changes})
        assert restored.status_code == 200, restored.text


async def test_instruction_tool_and_model_edits_of_the_supervisor_apply_on_its_next_run(stack: Stack) -> None:
    marker = f"Always sign as Captain {uuid.uuid4().hex[:6]}."
    async with stack.client() as client:
        session = await new_session(client)
        [profile] = [a for a in (await client.get("/api/agents")).json()["agents"] if a["id"] == "popagent"]
        assert "getTime" in profile["tools"] and profile["model"] is None

        # Several turns each way, so both agent-runner workers (and their built-agent caches) take some.
        for _ in range(3):
            stack.models.push(Turn.say("Before."))
            await chat(client, session, "hello")
        before = stack.models.requests[-1]
        assert marker not in system_text(before) and "getTime" in tool_names(before) and before["model"] == MODEL

        async with agent_edited(
            client,
            "popagent",
            instructions=f"{profile['instructions']}\n\n{marker}",
            tools=[name for name in profile["tools"] if name != "getTime"],
            model=OTHER_MODEL,
        ):
            for _ in range(3):
                stack.models.push(Turn.say("After."))
                await chat(client, session, "hello again")
                after = stack.models.requests[-1]
                assert marker in system_text(after)
                assert "getTime" not in tool_names(after)
                # The profile's model override wins over the route the request selected.
                assert after["model"] == OTHER_MODEL

        stack.models.push(Turn.say("Restored."))
        await chat(client, session, "and now?")
        restored = stack.models.requests[-1]
        assert marker not in system_text(restored) and "getTime" in tool_names(restored) and restored["model"] == MODEL


async def test_instruction_tool_and_model_edits_of_a_specialist_apply_on_its_next_delegation(stack: Stack) -> None:
    marker = f"Cite page numbers {uuid.uuid4().hex[:6]}."

    def delegate() -> None:
        stack.models.push(
            Turn.call(ToolCall("researcher", {"brief": "Look it up."}, id="call-d")),
            Turn.say("Found it."),
            Turn.say("Done.", chunk_size=100),
        )

    async with stack.client() as client:
        session = await new_session(client)
        [profile] = [a for a in (await client.get("/api/agents")).json()["agents"] if a["id"] == "researcher"]
        delegate()
        await chat(client, session, "research this")
        specialist = stack.models.requests[-2]
        assert marker not in system_text(specialist) and "webFetch" in tool_names(specialist)

        async with agent_edited(
            client,
            "researcher",
            instructions=f"{profile['instructions']}\n\n{marker}",
            tools=[name for name in profile["tools"] if name != "webFetch"],
            model=OTHER_MODEL,
        ):
            delegate()
            await chat(client, session, "research this again")
        supervisor, specialist, _ = stack.models.requests[-3:]
        assert marker in system_text(specialist)
        assert "webFetch" not in tool_names(specialist) and "webSearch" in tool_names(specialist)
        assert specialist["model"] == OTHER_MODEL and supervisor["model"] == MODEL
