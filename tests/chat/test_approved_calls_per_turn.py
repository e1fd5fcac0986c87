"""Calls that waited for a person's approval never run side by side in one turn, whichever agent run
made them (docs/approvals.md): the supervisor's approved command and an approved command of the
specialist it delegated to in the same step run one after the other, on the real chat stack."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx

from chat.approvals import answer_approval, paused, pending, supervisor_policy, workspace
from chat.helpers import chat
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack
from support.waiting import eventually

RUN = "mastra_workspace_execute_command"
# Each command prints when it starts and ends (nanoseconds); the supervisor's runs long enough for the
# specialist's to be asked and approved while it runs.
LONG = "echo start $(date +%s%N); sleep 2.5; echo end $(date +%s%N)"
SHORT = "echo start $(date +%s%N); sleep 0.3; echo end $(date +%s%N)"


@contextlib.asynccontextmanager
async def implementer_policy(client: httpx.AsyncClient, rules: list[dict[str, Any]]) -> AsyncIterator[None]:
    changed = await client.patch("/api/agents/implementer", json={"toolApproval": rules})
    assert changed.status_code == 200, changed.text
    try:
        yield
    finally:
        restored = await client.patch("/api/agents/implementer", json={"toolApproval": []})
        assert restored.status_code == 200, restored.text


def span_of(results: list[str]) -> tuple[int, int]:
    """(start, end) of the one timed command among a request's tool results."""
    [(start, end)] = [
        (int(re.findall(r"start (\d{19})", text)[0]), int(re.findall(r"end (\d{19})", text)[0]))
        for text in results
        if re.search(r"start \d{19}", text)
    ]
    return start, end


async def approval_of(client: httpx.AsyncClient, session: str, call_id: str) -> str:
    """The id of the pending approval of the call `call_id`, once it asks."""

    async def asked() -> list[dict[str, Any]]:
        return [a for a in await pending(client, session) if a["toolCallId"] == call_id]

    found: list[dict[str, Any]] = await eventually(
        asked, until=lambda calls: len(calls) == 1, what=f"the approval of {call_id}"
    )
    return found[0]["id"]


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_approved_calls_of_the_supervisor_and_its_specialist_never_overlap(stack: Stack) -> None:
    ask_shell = [{"group": "shell", "decision": "ask"}]
    stack.models.push(
        # The supervisor's one step: its own command (it asks) and a delegation (it does not).
        Turn.call(
            ToolCall(RUN, {"command": LONG}, id="s1"),
            ToolCall("implementer", {"brief": "Run the timing command."}, id="d1"),
        ),
        # The implementer's command asks too.
        Turn.call(ToolCall(RUN, {"command": SHORT}, id="i1")),
        Turn.say("Ran it."),
        Turn.say("Both ran."),
    )
    async with (
        stack.client() as client,
        supervisor_policy(client, ask_shell),
        implementer_policy(client, ask_shell),
    ):
        session, _ = await workspace(stack, client)
        assert paused(await chat(client, session, "run both"))
        [own] = await pending(client, session)
        assert (own["toolCallId"], own["agentId"]) == ("s1", "popagent")
        await answer_approval(client, own["id"], "approve")
        # While the supervisor's command runs, the implementer asks; approved at once, it still waits.
        found = await pending(client, session)
        [delegated] = [a for a in found if a["toolCallId"] == "i1"]
        assert delegated["agentId"] == "implementer"
        await answer_approval(client, delegated["id"], "approve")
        await eventually(lambda: len(stack.models.requests), until=lambda count: count == 4, what="both results")
    requests = stack.models.requests
    implementer_after, supervisor_after = requests[2], requests[3]
    specialist = span_of(tool_results(implementer_after))
    own_span = span_of(tool_results(supervisor_after))
    # The implementer was asked while the supervisor's command ran, and its command ran only after.
    assert own_span[1] <= specialist[0], f"the approved calls overlapped: {own_span} and {specialist}"


async def test_an_approved_delegation_s_specialist_runs_its_own_approved_calls_one_at_a_time(stack: Stack) -> None:
    """An approved delegation holds the turn's lock of approved calls while its specialist runs: the
    specialist's approved calls still run (they do not wait for their own caller), one at a time."""
    stack.models.push(
        Turn.call(ToolCall("implementer", {"brief": "Run the timing commands."}, id="d1")),
        Turn.call(ToolCall(RUN, {"command": SHORT}, id="i1"), ToolCall(RUN, {"command": SHORT}, id="i2")),
        Turn.say("Ran them."),
        Turn.say("Done."),
    )
    async with (
        stack.client() as client,
        supervisor_policy(client, [{"group": "delegation", "decision": "ask"}]),
        implementer_policy(client, [{"group": "shell", "decision": "ask"}]),
    ):
        session, _ = await workspace(stack, client)
        assert paused(await chat(client, session, "run them"))
        for call_id in ("d1", "i1", "i2"):
            await answer_approval(client, await approval_of(client, session, call_id), "approve")
        await eventually(lambda: len(stack.models.requests), until=lambda count: count == 4, what="the answers")
    first, second = sorted(
        (int(re.findall(r"start (\d{19})", text)[0]), int(re.findall(r"end (\d{19})", text)[0]))
        for text in tool_results(stack.models.requests[2])
    )
    assert first[1] <= second[0], f"the specialist's approved calls overlapped: {first} and {second}"
