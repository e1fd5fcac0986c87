"""popagent as an A2A agent end to end: the official a2a-sdk client, at protocol 1.0 and 0.3, over real
HTTP against a stack with the gateway, agent-runner and the scripted model."""

from __future__ import annotations

import asyncio

import pytest
from a2a.client import A2AClientError
from a2a.types.a2a_pb2 import CancelTaskRequest, GetTaskRequest, StreamResponse, SubscribeToTaskRequest, TaskState

from a2a_agent.helpers import (
    BEARER,
    VERSIONS,
    answer_of,
    connected,
    fetched_card,
    message_to,
    sent,
    status_text,
    the_task,
)
from support.model_gateway import ToolCall, Turn
from support.stacks import API_KEY, Stack
from support.waiting import eventually


async def test_the_card_is_public_and_names_the_endpoint_the_key_and_the_skills(stack: Stack) -> None:
    card = await fetched_card(stack)
    assert card.name == "popagent"
    assert card.capabilities.streaming
    assert {(i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces} == {
        (f"{stack.url}/a2a", "JSONRPC", "1.0"),
        (f"{stack.url}/a2a", "JSONRPC", "0.3"),
    }
    api_key = card.security_schemes["apiKey"].api_key_security_scheme
    assert (api_key.location, api_key.name) == ("header", "x-popagent-key")
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "bearer"
    assert [set(requirement.schemes) for requirement in card.security_requirements] == [{"apiKey"}, {"bearer"}]
    assert {skill.id for skill in card.skills} == {"chat", "research", "implementation", "review"}


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_message_without_the_key_is_refused_and_runs_no_turn(stack: Stack, version: str) -> None:
    for headers in ({}, {"authorization": f"Bearer {API_KEY[:-1]}"}, {"x-popagent-key": API_KEY[:-1]}):
        async with connected(stack, version, headers, streaming=False) as client:
            with pytest.raises(A2AClientError, match="401"):
                await sent(client, message_to("Is the build green?"))
    assert stack.models.requests == []


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("headers", [BEARER, {"x-popagent-key": API_KEY}], ids=["bearer", "x-popagent-key"])
async def test_a_message_is_answered_and_its_task_kept(stack: Stack, version: str, headers: dict[str, str]) -> None:
    reply = "The build is green and the release can go out today."
    stack.models.push(Turn.say(reply))
    async with connected(stack, version, headers, streaming=False) as client:
        task = the_task(await sent(client, message_to("Is the build green?")))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED, status_text(task)
        assert answer_of(task) == reply
        kept = await client.get_task(GetTaskRequest(id=task.id))
    assert (kept.id, kept.status.state, answer_of(kept)) == (task.id, TaskState.TASK_STATE_COMPLETED, reply)
    # The context is the popagent session (its id, a UUID, is a session id), which kept the exchange.
    async with stack.client() as api:
        transcript = (await api.get(f"/api/sessions/{task.context_id}/export")).text
    assert "## User\n\nIs the build green?\n\n## popagent\n\n" + reply in transcript


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_streamed_message_arrives_in_order_and_completes(stack: Stack, version: str) -> None:
    reply = "The build is green and the release can go out today."
    stack.models.push(Turn.say(reply, chunk_size=6, chunk_delay_s=0.02))
    async with connected(stack, version, BEARER) as client:
        events = await sent(client, message_to("Is the build green?"))
    pieces = [e.artifact_update for e in events if e.HasField("artifact_update")]
    *streamed, whole = pieces
    # Piece by piece, each appended to the first, then the whole answer as the artifact's last chunk.
    assert len(streamed) > 1
    assert "".join(piece.artifact.parts[0].text for piece in streamed) == reply
    assert [piece.append for piece in streamed] == [False] + [True] * (len(streamed) - 1)
    assert (whole.append, whole.last_chunk, whole.artifact.parts[0].text) == (False, True, reply)
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    assert events[-1].HasField("status_update"), "the completed status is the last event"


async def _first_piece(events: asyncio.Queue[StreamResponse]) -> StreamResponse:
    while not (event := await events.get()).HasField("artifact_update"):
        pass
    return event


@pytest.mark.parametrize("version", VERSIONS)
async def test_cancelling_a_task_cancels_its_turn(stack: Stack, version: str) -> None:
    # Slow: some 20 s of text, so the cancel finds it running.
    stack.models.push(Turn.say("word " * 200, chunk_size=5, chunk_delay_s=0.1))
    events: asyncio.Queue[StreamResponse] = asyncio.Queue()
    async with connected(stack, version, BEARER) as client:

        async def stream() -> None:
            async for event in client.send_message(message_to("Write a long essay.")):
                await events.put(event)

        streaming = asyncio.create_task(stream())
        try:
            first = await asyncio.wait_for(_first_piece(events), 20.0)
            task_id, session = first.artifact_update.task_id, first.artifact_update.context_id
            cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
            kept = await client.get_task(GetTaskRequest(id=task_id))
        finally:
            streaming.cancel()
    assert kept.status.state == TaskState.TASK_STATE_CANCELED

    async def status() -> str | None:
        async with stack.db() as conn:
            return await conn.fetchval("SELECT status FROM popagent_turns WHERE session_id = $1", session)

    assert await eventually(status, until=lambda s: s != "running", within=10.0) == "cancelled"


async def test_a_turn_cancelled_through_the_api_ends_its_task_canceled(stack: Stack) -> None:
    stack.models.push(Turn.say("word " * 200, chunk_size=5, chunk_delay_s=0.1))
    async with connected(stack, VERSIONS[0], BEARER) as client, stack.client() as api:
        events = client.send_message(message_to("Write a long essay."))
        session = ""
        async for event in events:
            if event.HasField("artifact_update"):
                session = event.artifact_update.context_id
                break
        assert session, "no piece of the answer arrived"
        async with stack.db() as conn:
            turn_id = await conn.fetchval(
                "SELECT id FROM popagent_turns WHERE session_id = $1 AND status = 'running'", session
            )
        cancelled = await api.post(f"/api/sessions/{session}/turns/{turn_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        rest = [event async for event in events]
    assert rest[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_second_client_resubscribes_to_a_running_task_and_sees_it_complete(stack: Stack, version: str) -> None:
    reply = "one two three four five six seven eight nine ten"
    stack.models.push(Turn.say(reply, chunk_size=4, chunk_delay_s=0.1))
    events: asyncio.Queue[StreamResponse] = asyncio.Queue()
    async with connected(stack, version, BEARER) as client, connected(stack, version, BEARER) as other:

        async def stream() -> None:
            async for event in client.send_message(message_to("Count to ten.")):
                await events.put(event)

        streaming = asyncio.create_task(stream())
        try:
            first = await asyncio.wait_for(_first_piece(events), 20.0)
            followed = [
                event async for event in other.subscribe(SubscribeToTaskRequest(id=first.artifact_update.task_id))
            ]
        finally:
            await streaming
    states = [e.status_update.status.state for e in followed if e.HasField("status_update")]
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    [whole] = [e.artifact_update for e in followed if e.HasField("artifact_update") and e.artifact_update.last_chunk]
    assert whole.artifact.parts[0].text == reply


@pytest.mark.parametrize("version", VERSIONS)
async def test_refusals_are_failed_tasks_with_the_reason_an_api_client_reads(stack: Stack, version: str) -> None:
    async with connected(stack, version, BEARER, streaming=False) as client:
        unknown = the_task(await sent(client, message_to("hi", model="nobody/no-model")))
        assert unknown.status.state == TaskState.TASK_STATE_FAILED
        async with stack.client() as api:
            probe = (await api.post("/api/sessions", json={})).json()["id"]
            refused = await api.post(
                "/api/chat",
                json={
                    "id": probe,
                    "model": "nobody/no-model",
                    "message": {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
                },
            )
        assert refused.status_code == 404, refused.text
        assert status_text(unknown) == refused.json()["error"]
        assert "nobody/no-model" in status_text(unknown)
        # Refused before it started: the context's session was not created.
        async with stack.client() as api:
            assert (await api.get(f"/api/sessions/{unknown.context_id}")).status_code == 404

        too_long = message_to("hi")
        too_long.metadata.update({"workspaceId": "w" * 200})
        invalid = the_task(await sent(client, too_long))
        assert invalid.status.state == TaskState.TASK_STATE_FAILED
        assert status_text(invalid).startswith("invalid input: workspaceId:"), status_text(invalid)

        stack.models.push(Turn.fail(500, "upstream exploded"))
        failed = the_task(await sent(client, message_to("hi")))
    assert failed.status.state == TaskState.TASK_STATE_FAILED
    assert "The model provider failed (HTTP 500): upstream exploded." in status_text(failed)


async def test_a_turn_that_waits_for_an_approval_is_input_required_with_the_approval_id(stack: Stack) -> None:
    stack.models.push(Turn.call(ToolCall("getTime", {}, id="t1")), Turn.say("It is noon."))
    async with stack.client() as api:
        [supervisor] = [a for a in (await api.get("/api/agents")).json()["agents"] if a["id"] == "popagent"]
        # As a rule is written (a rule's absent field answers null).
        policy = [
            {key: value for key, value in rule.items() if value is not None} for rule in supervisor["toolApproval"]
        ]
        asked = await api.patch("/api/agents/popagent", json={"toolApproval": [{"tool": "getTime", "decision": "ask"}]})
        assert asked.status_code == 200, asked.text
        try:
            async with connected(stack, VERSIONS[0], BEARER, streaming=False) as client:
                waiting = the_task(await sent(client, message_to("What time is it?")))
                # The waiting turn still runs: another message in its context is refused, naming it.
                second = the_task(await sent(client, message_to("Hello?", context_id=waiting.context_id)))
        finally:
            restored = await api.patch("/api/agents/popagent", json={"toolApproval": policy})
            assert restored.status_code == 200, restored.text
        assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        listed = (await api.get("/api/approvals", params={"sessionId": waiting.context_id})).json()
        [approval] = listed["approvals"]
        assert f"getTime waits for approval {approval['id']}" in status_text(waiting)
        assert second.status.state == TaskState.TASK_STATE_FAILED
        assert "running turn" in status_text(second)
        answered = await api.post(f"/api/approvals/{approval['id']}", json={"decision": "approve"})
        assert answered.status_code == 200, answered.text

        async def transcript() -> str:
            return (await api.get(f"/api/sessions/{waiting.context_id}/export")).text

        await eventually(transcript, until=lambda text: "It is noon." in text, within=20.0, what="the answer")


async def test_the_context_continues_its_session(stack: Stack) -> None:
    stack.models.push(Turn.say("Green."), Turn.say("Yes, today."))
    async with connected(stack, VERSIONS[0], BEARER, streaming=False) as client:
        first = the_task(await sent(client, message_to("Is the build green?")))
        again = the_task(await sent(client, message_to("Today?", context_id=first.context_id)))
    assert (again.context_id, answer_of(again)) == (first.context_id, "Yes, today.")
    assert any("Is the build green?" in str(message) for message in stack.models.requests[-1]["messages"])
