"""The suite's canary check for a Matrix bot's access token, against a real Synapse (support/synapse.py):
the bot's token is the session's canary (support/canary.py), written into the homeserver's store since
Synapse issues tokens itself. A question gets a streamed answer in its thread and a task's result is
posted to the room; the token is in no API answer (the connection, its history, the list), no span
(every span sampled; attributes and events), no NATS message (events and the turn log) and no log
record at any level (checked here, and by the suite-wide canary plugin on the captured output)."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from channels.helpers import channel_workspace
from popagent_core.span_store import span_row
from support.canary import CANARY, assert_no_canary
from support.model_gateway import Turn
from support.stacks import Stack
from support.synapse import Homeserver, synapse
from support.tracing import collecting_spans
from support.waiting import eventually

# Synapse takes 10-30 s to start on a loaded machine; the conversation waits on a real homeserver's sync.
pytestmark = pytest.mark.timeout(300)

# An access token goes in an Authorization header: no spaces. The canary's random core gives a leak away.
TOKEN_CANARY = CANARY.replace(" ", "")


@pytest.fixture(scope="module")
def homeserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Homeserver]:
    with synapse(tmp_path_factory.mktemp("synapse")) as server:
        yield server


def _said_by(events: list[dict[str, Any]], sender: str) -> list[str]:
    """What `sender`'s messages and their edits say, in a timeline (MatrixUser.events)."""
    said = []
    for event in events:
        if event["sender"] == sender and event["type"] == "m.room.message":
            content = event.get("content", {})
            said.append(str(content.get("m.new_content", content).get("body", "")))
    return said


def _has_said(sender: str, text: str) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda events: any(text in said for said in _said_by(events, sender))


async def test_a_matrix_bots_access_token_never_reaches_an_answer_a_span_an_event_or_a_log(
    stack: Stack, homeserver: Homeserver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    suffix = uuid.uuid4().hex[:6]
    bot = homeserver.register(f"popbot{suffix}", token=TOKEN_CANARY)
    ada = homeserver.register(f"ada{suffix}")
    published: list[Msg] = []
    nc = NatsClient()
    await nc.connect(stack.nats_url)

    async def collect(msg: Msg) -> None:
        published.append(msg)

    await nc.subscribe("popagent.>", cb=collect)
    await nc.subscribe("popagent_turn_log.>", cb=collect)
    answers: list[str] = []
    try:
        with collecting_spans(ALWAYS_ON) as spans:
            async with stack.client() as client:
                workspace, _ = await channel_workspace(stack, client)
                created = await client.post(
                    "/api/channels",
                    json={
                        "name": f"matrix-{suffix}",
                        "platform": "matrix",
                        "credentials": {"botToken": bot.token},
                        "botUserId": bot.user_id,
                        "apiBaseUrl": homeserver.url,
                        "allowedUsers": [ada.user_id],
                        "workspaceId": workspace,
                    },
                )
                assert created.status_code == 201, created.text
                answers.append(created.text)
                channel = created.json()

                room = await ada.create_room([bot.user_id])

                async def timeline() -> list[dict[str, Any]]:
                    return await ada.events(room)

                await eventually(lambda: ada.members(room), until=lambda m: bot.user_id in m, within=60)

                answer = "Streamed through edits, with the token kept to the Authorization header."
                stack.models.push(Turn.say(answer, chunk_size=8, chunk_delay_s=0.05))
                await ada.say(room, "where does the token go?")
                streamed: list[dict[str, Any]] = await eventually(
                    timeline,
                    until=_has_said(bot.user_id, answer),
                    within=60,
                    what="the streamed answer",
                )
                assert len(_said_by(streamed, bot.user_id)) >= 2, "the answer streamed as edits of one message"

                stack.models.push(Turn.say("The weekly summary."))
                task = await client.post(
                    "/api/tasks",
                    json={
                        "prompt": "Summarise the week.",
                        "workspaceId": workspace,
                        "channel": {"connectionId": channel["id"], "conversation": room},
                    },
                )
                assert task.status_code == 201, task.text
                answers.append(task.text)
                posted: list[dict[str, Any]] = await eventually(
                    timeline,
                    until=_has_said(bot.user_id, "The weekly summary."),
                    within=60,
                    what="the task's result",
                )
                assert any(task.json()["id"] in said for said in _said_by(posted, bot.user_id))
                read_task = await client.get(f"/api/tasks/{task.json()['id']}")
                assert read_task.status_code == 200, read_task.text
                answers.append(read_task.text)

                for path in ("", "/history"):
                    read = await client.get(f"/api/channels/{channel['id']}{path}")
                    assert read.status_code == 200, read.text
                    answers.append(read.text)
                answers.append((await client.get("/api/channels")).text)
                answers.append((await client.patch(f"/api/channels/{channel['id']}", json={"enabled": False})).text)
                # The bot really used the token: the room shows what it said through it.
                assert len(_said_by(await bot.events(room), bot.user_id)) >= 2
                assert (await client.delete(f"/api/channels/{channel['id']}")).status_code == 204
            recorded = spans.all()
    finally:
        await nc.close()

    assert recorded, "no span was recorded"
    assert published, "no NATS message was seen"
    assert caplog.records, "no log record was captured"
    span_data = [
        [
            json.dumps({key: str(value) for key, value in (span.attributes or {}).items()}),
            json.dumps([(e.name, {k: str(v) for k, v in (e.attributes or {}).items()}) for e in span.events]),
            json.dumps([str(value) for value in span_row(span)]),
        ]
        for span in recorded
    ]
    checks: list[tuple[str, str | bytes]] = [
        ("API answers", "\n".join(answers)),
        ("spans", json.dumps(span_data)),
        ("NATS", b"\n".join(msg.subject.encode() + msg.data + str(msg.headers or "").encode() for msg in published)),
        ("log records", caplog.text + "\n".join(str(record.__dict__) for record in caplog.records)),
    ]
    for where, data in checks:
        assert_no_canary(data, TOKEN_CANARY, where=where)
        assert_no_canary(data, where=where)  # its random core alone, too
    # A check that found nothing is a real one: the same search finds the token where it does appear.
    with pytest.raises(AssertionError):
        assert_no_canary(httpx.Headers({"Authorization": f"Bearer {bot.token}"})["authorization"], TOKEN_CANARY)
