"""Helpers of the evolution tests: outcome events on the real bus, autonomy toggles, waiting on signals."""

from __future__ import annotations

import contextlib
import secrets
import uuid
from typing import Any

import httpx
from chat.helpers import chat, new_session, settings_changed

from popagent.events.v1 import events_pb2
from popagent_core import bus, subjects
from support.model_gateway import Turn
from support.stacks import Stack
from support.waiting import eventually

# The heading learned overlays open with in an agent's instructions.
OVERLAY_MARK = "## Learned guidance"


def system_text(request: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "system")


async def supervisor_system(stack: Stack, client: Any) -> str:
    """The system text of a fresh plain turn of the supervisor (popagent).

    The turn's own request is found by its prompt: the evolution service's reflections and
    the memory observer call the same model server and may land after it.
    """
    prompt = f"what now? ({uuid.uuid4().hex[:8]})"
    stack.models.push(Turn.say("Done."))
    await chat(client, await new_session(client), prompt)
    [request] = [r for r in stack.models.requests if prompt in str(r["messages"])]
    return system_text(request)


def trace_id() -> str:
    return secrets.token_hex(16)


def agent_id() -> str:
    """An agent id of its own per test, so tests sharing the stack never see each other's signals."""
    return f"agent-{uuid.uuid4().hex[:8]}"


async def publish_failure(
    stack: Stack,
    agent: str,
    trace: str,
    *,
    failure_class: str = "rejected",
    goal: str = "summarize the report",
    evidence: str = "The model provider rejected the request",
    times: int = 1,
) -> None:
    """A failing turn's outcome event, published `times` times with distinct message ids."""
    event = events_pb2.TurnCompleted(
        turn_id=f"turn-{uuid.uuid4().hex[:8]}",
        trace_id=trace,
        session_id="session-1",
        agent_id=agent,
        kind="failure",
        goal=goal,
        evidence=evidence,
        failure_class=failure_class,
    )
    async with bus.connect(stack.nats_url, name="evolution-tests") as nc:
        js = nc.jetstream()
        await bus.ensure_streams(js, ("agent_runner",))
        for _ in range(times):
            await js.publish(
                subjects.TURN_COMPLETED, event.SerializeToString(), headers={"Nats-Msg-Id": uuid.uuid4().hex}
            )


async def signals(client: httpx.AsyncClient, agent: str, **query: str) -> list[dict[str, Any]]:
    response = await client.get("/api/autonomy/signals", params={"agentId": agent, **query})
    assert response.status_code == 200, response.text
    return response.json()["signals"]


async def settled_signals(client: httpx.AsyncClient, agent: str, count: int, *statuses: str) -> list[dict[str, Any]]:
    """The agent's signals once there are `count` and each is in one of `statuses`."""

    async def found() -> list[dict[str, Any]]:
        return await signals(client, agent)

    def done(rows: list[dict[str, Any]]) -> bool:
        return len(rows) == count and all(row["status"] in statuses for row in rows)

    return await eventually(found, until=done, what=f"{count} signals of {agent} in {statuses}")


async def revisions(client: httpx.AsyncClient, agent: str) -> list[dict[str, Any]]:
    response = await client.get("/api/autonomy/revisions", params={"agentId": agent})
    assert response.status_code == 200, response.text
    return response.json()["revisions"]


def autonomy(client: httpx.AsyncClient, **changes: bool) -> contextlib.AbstractAsyncContextManager[None]:
    """Autonomy settings changed for the block, then restored."""
    return settings_changed(client, "autonomy", **changes)


async def learned_tables(stack: Stack) -> tuple[list[Any], ...]:
    """Every row of the learned tables, to compare before and after."""
    tables = ("popagent_learned_overlays", "popagent_learned_skills", "popagent_evolution_revisions")
    async with stack.db("evolution") as conn:
        rows = [[tuple(row) for row in await conn.fetch(f"SELECT * FROM {table} ORDER BY 1")] for table in tables]
    return tuple(rows)
