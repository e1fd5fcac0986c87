"""The suite's canary check for channel bot tokens: a Slack and a Telegram connection whose bot tokens
hold the session's canary (support/canary.py) take a message, reply, post and are read back; the
token is in no API answer, no span (every span sampled), no NATS message (events and the turn log)
and no captured log line (the suite-wide canary plugin fails the test if one holds it)."""

from __future__ import annotations

import json
import uuid

import httpx
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from channels.helpers import connect, deliver_telegram, slack_headers, telegram_update
from channels.standins import dumps, serving
from popagent_core.span_store import span_row
from support.canary import CANARY, assert_no_canary
from support.model_gateway import Turn
from support.stacks import Stack
from support.tracing import collecting_spans
from support.waiting import eventually

# A bot token is printable ASCII without spaces; the canary's random core is what gives a leak away.
TOKEN_CANARY = CANARY.replace(" ", "")


async def test_a_bot_token_never_reaches_an_answer_a_span_an_event_or_a_log(stack: Stack) -> None:
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
            async with (
                stack.client() as client,
                serving("slack", "xoxb-" + TOKEN_CANARY) as slack,
                serving("telegram", "7:" + TOKEN_CANARY) as telegram,
            ):
                slack_channel = await connect(client, "slack", slack)
                telegram_channel = await connect(client, "telegram", telegram)
                answers += [json.dumps(slack_channel), json.dumps(telegram_channel)]
                async with httpx.AsyncClient(base_url=stack.url) as keyless:
                    # One at a time: the model stand-in answers in the order it is asked.
                    stack.models.push(Turn.say("Slack hears you."))
                    event = dumps(
                        {
                            "type": "event_callback",
                            "event_id": f"Ev{uuid.uuid4().hex[:8]}",
                            "event": {"type": "message", "channel": "CK", "user": "U1", "text": "hi", "ts": "3.3"},
                        }
                    )
                    url = f"/api/channels/{slack_channel['id']}/events"
                    answers.append((await keyless.post(url, content=event, headers=slack_headers(event))).text)
                    await eventually(
                        lambda: [m.text for m in slack.in_conversation("CK")],
                        until=lambda t: t == ["Slack hears you."],
                        within=30,
                    )
                    stack.models.push(Turn.say("Telegram hears you."))
                    answers.append(
                        (await deliver_telegram(keyless, telegram_channel["id"], telegram_update(70, 71, "hi"))).text
                    )
                    await eventually(
                        lambda: [m.text for m in telegram.in_conversation("71")],
                        until=lambda t: t == ["Telegram hears you\\."],
                        within=30,
                    )
                for channel in (slack_channel, telegram_channel):
                    posted = await client.post(
                        f"/api/channels/{channel['id']}/post", json={"conversation": "CK", "text": "a notice"}
                    )
                    assert posted.status_code == 200, posted.text
                    answers.append(posted.text)
                    for path in ("", "/history"):
                        answers.append((await client.get(f"/api/channels/{channel['id']}{path}")).text)
                    answers.append((await client.patch(f"/api/channels/{channel['id']}", json={"enabled": False})).text)
                answers.append((await client.get("/api/channels")).text)
                # Two bot tokens were used: the stand-ins saw them, so a check that found nothing is a real one.
                assert slack.calls and telegram.calls
                for channel in (slack_channel, telegram_channel):
                    assert (await client.delete(f"/api/channels/{channel['id']}")).status_code == 204
            recorded = spans.all()
    finally:
        await nc.close()
    assert recorded, "no span was recorded"
    assert_no_canary("\n".join(answers), where="API answers")
    assert_no_canary(json.dumps([[str(value) for value in span_row(span)] for span in recorded]), where="spans")
    assert published, "no NATS message was seen"
    assert_no_canary(b"\n".join(msg.data + str(msg.headers or "").encode() for msg in published), where="NATS")
