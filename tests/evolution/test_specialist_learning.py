"""What evolution learns from a specialist's failure reaches that specialist's next run, and only it:
a failed delegation to the researcher is the researcher's signal, its reflection is the researcher's,
and the overlay and learned skill it writes are composed into the researcher's instructions on its
next delegation while the supervisor's instructions in that same turn stay without them. The
reflection reads the researcher's own success rate, its successes counted beside its failures."""

from __future__ import annotations

import uuid
from typing import Any

from chat.helpers import chat, new_session, text_of

from evolution.helpers import OVERLAY_MARK, autonomy, revisions, signals, system_text
from support.model_gateway import ToolCall, Turn
from support.reflection import ReflectionRequest, proposal, reflection_responder
from support.stacks import Stack
from support.waiting import eventually

SKILL = "troubleshoot-rejected"


def request_with(stack: Stack, text: str) -> dict[str, Any]:
    """The first model request whose messages carry `text` as a user's words (the turn's own: other
    requests, reflections and the memory observer's, can land among them)."""
    return next(
        r
        for r in stack.models.requests
        if any(m["role"] == "user" and text in str(m["content"]) for m in r["messages"])
    )


async def delegated_turn(stack: Stack, client: Any, brief: str) -> tuple[str, str]:
    """A chat turn that delegates `brief` to the researcher: (the supervisor's system text, the
    researcher's system text)."""
    prompt = f"look something up ({uuid.uuid4().hex[:8]})"
    stack.models.push(
        Turn.call(ToolCall("researcher", {"brief": brief}, id=f"d-{uuid.uuid4().hex[:6]}")),
        Turn.say("Found it."),
        Turn.say("The researcher found it."),
    )
    chunks = await chat(client, await new_session(client), prompt)
    assert text_of(chunks) == "The researcher found it."
    return system_text(request_with(stack, prompt)), system_text(request_with(stack, brief))


async def test_a_specialists_failure_teaches_the_specialist_and_reaches_its_next_run(stack: Stack) -> None:
    lesson = f"Briefs named no source to look in ({uuid.uuid4().hex[:8]})."
    seen: list[ReflectionRequest] = []
    stack.models.responder = reflection_responder(
        lambda r: proposal(("tool_failure_checklist", r.ids), ("troubleshooting_skill", r.ids), lesson=lesson), seen
    )
    async with stack.db("evolution") as conn:
        await conn.execute("DELETE FROM popagent_evolution_outcomes WHERE agent_id = 'researcher'")
    async with stack.client() as client, autonomy(client, evolutionEnabled=True, skillCreationEnabled=True):
        supervisor_before, researcher_before = await delegated_turn(stack, client, f"find it ({uuid.uuid4().hex})")
        assert lesson not in supervisor_before and lesson not in researcher_before

        # The delegation fails (the model gateway refuses the researcher's request); the supervisor answers.
        failing_brief = f"find the changelog ({uuid.uuid4().hex[:8]})"
        stack.models.push(
            Turn.call(ToolCall("researcher", {"brief": failing_brief}, id="d-fail")),
            Turn.fail(400, "bad request upstream"),
            Turn.say("The researcher could not look it up."),
        )
        chunks = await chat(client, await new_session(client), "what changed?")
        assert text_of(chunks) == "The researcher could not look it up."
        trace = chunks[0]["messageMetadata"]["traceId"]

        async def researcher_signals() -> list[dict[str, Any]]:
            return [s for s in await signals(client, "researcher") if s["traceId"] == trace]

        async def statuses() -> list[str]:
            return [s["status"] for s in await researcher_signals()]

        await eventually(statuses, until=lambda found: found == ["applied"], what="the researcher's applied signal")
        [signal] = await researcher_signals()
        assert (signal["agentId"], signal["goal"]) == ("researcher", failing_brief)
        assert not [s for s in await signals(client, "popagent") if s["traceId"] == trace]
        [reflection] = [r for r in seen if signal["id"] in r.ids]
        assert reflection.agent_id == "researcher"
        # The reflection reads the researcher's own rate: its successful run counts beside its failure
        # (the supervisor's runs, all successes, are not the researcher's).
        assert "Recent outcomes (last 7 days): 1 succeeded, 1 failed (50% failed)." in reflection.prompt
        learned = [r for r in await revisions(client, "researcher") if r["signalIds"] == [signal["id"]]]
        assert sorted(r["strategy"] for r in learned) == ["tool_failure_checklist", "troubleshooting_skill"]
        assert not [r for r in await revisions(client, "popagent") if signal["id"] in r["signalIds"]]

        try:
            # The researcher's next run carries the overlay (after its own instructions) and lists the
            # learned skill; the supervisor's instructions in the same turn carry neither.
            async def next_run() -> tuple[str, str]:
                return await delegated_turn(stack, client, f"find it again ({uuid.uuid4().hex})")

            supervisor, researcher = await eventually(
                next_run, until=lambda systems: lesson in systems[1], what="the overlay in the researcher's run"
            )
            assert researcher.index(researcher_before.split("\n\n")[0]) < researcher.index(OVERLAY_MARK)
            assert "### When a step fails" in researcher
            assert f"<name>{SKILL}</name>" in researcher
            assert lesson not in supervisor
        finally:
            for revision in learned:
                reverted = await client.post(f"/api/autonomy/revisions/{revision['id']}/revert")
                assert reverted.status_code == 200, reverted.text
