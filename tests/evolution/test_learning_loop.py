"""The evolution loop end to end over real processes, with a scripted reflection model.

A failing turn becomes a signal, reflection picks a code-owned strategy, the overlay it
writes reaches the next turn's request after the user's instructions, a revert takes it
away, and a second revert of the same revision is refused.
"""

from __future__ import annotations

from typing import Any, cast

from chat.helpers import chat, new_session

from evolution.helpers import OVERLAY_MARK, autonomy, revisions, signals, supervisor_system
from support.model_gateway import Turn
from support.reflection import ReflectionRequest, proposal, reflection_responder
from support.stacks import Stack
from support.waiting import eventually

LESSON = "Answers claimed results that no tool had shown."


async def test_a_failing_turn_teaches_an_overlay_that_a_revert_takes_away_once(stack: Stack) -> None:
    seen: list[ReflectionRequest] = []

    def choose(request: ReflectionRequest) -> str:
        return proposal(("verify_before_answering", request.ids), lesson=LESSON)

    stack.models.responder = reflection_responder(choose, seen)
    async with stack.client() as client, autonomy(client, evolutionEnabled=True):
        before = await supervisor_system(stack, client)
        assert OVERLAY_MARK not in before

        stack.models.push(Turn.fail(400, "bad request upstream"))
        chunks = await chat(client, await new_session(client), "summarize the quarterly report")
        assert any(chunk.get("type") == "error" for chunk in chunks if isinstance(chunk, dict))

        trace = chunks[0]["messageMetadata"]["traceId"]

        async def of_this_trace() -> list[dict[str, Any]]:
            return [s for s in await signals(client, "popagent") if s["traceId"] == trace]

        def applied(rows: Any) -> bool:
            return [r["status"] for r in rows] == ["applied"]

        rows = await eventually(of_this_trace, until=applied, what="the applied signal")
        [signal] = cast(list[dict[str, Any]], rows)
        assert len(signal["traceId"]) == 32 and signal["failureClass"] == "rejected"
        assert signal["goal"] == "summarize the quarterly report"
        [request] = [r for r in seen if signal["id"] in r.ids]
        assert request.agent_id == "popagent" and request.ids == [signal["id"]]
        [revision] = [r for r in await revisions(client, "popagent") if r["signalIds"] == [signal["id"]]]
        assert (revision["targetKind"], revision["strategy"]) == ("overlay", "verify_before_answering")
        assert revision["signalIds"] == [signal["id"]] and revision["traceIds"] == [signal["traceId"]]
        section = revision["after"]["sections"]["verify_before_answering"]
        # The section names its cases and carries the reflection's lesson; it never quotes the turn.
        assert "Learned from 1 failed turn (rejected)." in section and LESSON in section
        assert "summarize the quarterly report" not in section

        # The next turn carries the overlay after the user-managed instructions, unchanged.
        async def overlaid() -> str:
            return await supervisor_system(stack, client)

        carried = await eventually(overlaid, until=lambda text: OVERLAY_MARK in text, what="the overlay in a run")
        assert carried.startswith(before.split("\n\n<available_skills>")[0][:200])
        assert carried.index("You are popagent") < carried.index(OVERLAY_MARK)
        assert "Verify before answering" in carried

        reverted = await client.post(f"/api/autonomy/revisions/{revision['id']}/revert")
        assert reverted.status_code == 200, reverted.text
        compensation = reverted.json()
        assert compensation["revertsRevisionId"] == revision["id"] and compensation["strategy"] == "revert"
        assert compensation["before"] == revision["after"] and compensation["after"] == revision["before"]

        await eventually(overlaid, until=lambda text: OVERLAY_MARK not in text, what="the overlay gone from runs")

        again = await client.post(f"/api/autonomy/revisions/{revision['id']}/revert")
        assert again.status_code == 409 and "already reverted" in again.json()["error"]
        listed = [r for r in await revisions(client, "popagent") if r["signalIds"] == [signal["id"]]]
        assert [r["id"] for r in listed] == [compensation["id"], revision["id"]]
        assert listed[1]["revertedById"] == compensation["id"]
