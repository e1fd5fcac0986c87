"""Feedback on an answer: stored in the observability store, listed, and a thumbs down published as an event."""

from __future__ import annotations

import httpx
import nats
import orjson
from chat.helpers import chat, new_session
from core.helpers import stream_messages

from popagent_core import subjects
from popagent_gateway.settings import Settings as GatewaySettings
from support.model_gateway import Turn
from support.stacks import API_KEY, Stack, serve_gateway
from support.tracing import collecting_spans


async def answered_turn(stack: Stack, client: httpx.AsyncClient) -> tuple[str, str, str, str]:
    """(session, assistant message id, turn id, trace id) of one answered turn."""
    stack.models.push(Turn.say("Noon."))
    with collecting_spans():  # the test process traces only while a test collects
        session = await new_session(client)
        chunks = await chat(client, session, "time?")
    start = next(c for c in chunks if isinstance(c, dict) and c.get("type") == "start")
    metadata = start["messageMetadata"]
    return session, start["messageId"], metadata["turnId"], metadata["traceId"]


async def test_feedback_round_trips_and_a_thumbs_down_is_published(chat_stack: Stack) -> None:
    stack = chat_stack
    async with stack.client() as client:
        session, message_id, turn_id, trace_id = await answered_turn(stack, client)
        up = await client.post(
            "/api/observability/feedback",
            json={"sessionId": session, "messageId": message_id, "traceId": trace_id, "rating": "up"},
        )
        assert up.status_code == 201, up.text
        down = await client.post(
            "/api/observability/feedback",
            json={
                "sessionId": session,
                "turnId": turn_id,
                "traceId": trace_id,
                "rating": "down",
                "comment": "wrong time zone",
            },
        )
        assert down.status_code == 201, down.text
        given = down.json()
        assert (given["rating"], given["comment"], given["turnId"], given["messageId"]) == (
            "down",
            "wrong time zone",
            turn_id,
            None,
        )

        listed = (await client.get("/api/observability/feedback", params={"sessionId": session})).json()
        assert [(f["rating"], f["traceId"]) for f in listed["feedback"]] == [("down", trace_id), ("up", trace_id)]
        assert listed["feedback"][1]["messageId"] == message_id
        only_down = await client.get("/api/observability/feedback", params={"sessionId": session, "rating": "down"})
        assert [f["id"] for f in only_down.json()["feedback"]] == [given["id"]]
        paged = (await client.get("/api/observability/feedback", params={"sessionId": session, "limit": 1})).json()
        rest = await client.get(
            "/api/observability/feedback", params={"sessionId": session, "limit": 1, "cursor": paged["nextCursor"]}
        )
        assert [f["rating"] for f in paged["feedback"] + rest.json()["feedback"]] == ["down", "up"]

        # Bounded and on something.
        too_long = {
            "sessionId": session,
            "turnId": turn_id,
            "traceId": trace_id,
            "rating": "down",
            "comment": "x" * 2001,
        }
        assert (await client.post("/api/observability/feedback", json=too_long)).status_code == 422
        on_nothing = {"sessionId": session, "traceId": trace_id, "rating": "up"}
        assert (await client.post("/api/observability/feedback", json=on_nothing)).status_code == 422

    # Only the thumbs down is an event, acknowledged by the stream before the answer.
    nc = await nats.connect(stack.nats_url)
    try:
        messages = await stream_messages(nc.jetstream(), subjects.NEGATIVE_FEEDBACK_GIVEN)
    finally:
        await nc.close()
    ours = [orjson.loads(m.data or b"{}") for m in messages]
    ours = [event for event in ours if event["sessionId"] == session]
    assert ours == [given]


async def test_a_thumbs_down_the_bus_does_not_take_is_not_kept(chat_stack: Stack) -> None:
    stack = chat_stack
    settings = GatewaySettings(**{**stack.gateway_env, "NATS_URL": "nats://127.0.0.1:1"})
    async with (
        serve_gateway(settings) as url,
        httpx.AsyncClient(base_url=url, headers={"x-popagent-key": API_KEY}, timeout=30.0) as client,
    ):
        session, message_id, _, trace_id = await answered_turn(stack, client)
        body = {"sessionId": session, "messageId": message_id, "traceId": trace_id}
        down = await client.post("/api/observability/feedback", json={**body, "rating": "down"})
        assert down.status_code == 503, down.text
        # A thumbs up needs no event: it is kept.
        assert (await client.post("/api/observability/feedback", json={**body, "rating": "up"})).status_code == 201
        listed = (await client.get("/api/observability/feedback", params={"sessionId": session})).json()
        assert [f["rating"] for f in listed["feedback"]] == ["up"]
