"""Slack's Stop button (docs/channels.md, Cancellation) against the Slack stand-in: a streaming reply
carries a Block Kit Stop button; a press by someone who neither asked nor approves is refused
privately and the reply goes on; the asker's press cancels the turn, and the final edit says so
without the button."""

from __future__ import annotations

import asyncio
import urllib.parse
import uuid

import httpx

from channels.helpers import connect, slack_headers
from channels.standins import Message, dumps, serving
from support.model_gateway import Turn
from support.stacks import Stack
from support.waiting import eventually


def stop_press(user: str, value: str, message_ts: str) -> bytes:
    payload = {
        "type": "block_actions",
        "user": {"id": user},
        "channel": {"id": "C9"},
        "container": {"type": "message", "message_ts": message_ts, "channel_id": "C9"},
        "actions": [{"type": "button", "action_id": "popagent_stop", "value": value}],
    }
    return urllib.parse.urlencode({"payload": dumps(payload).decode()}).encode()


async def test_only_the_asker_or_an_approver_stops_a_streaming_reply_with_its_button(stack: Stack) -> None:
    async with stack.client() as client, serving("slack", "xoxb-" + uuid.uuid4().hex) as slack:
        channel = await connect(client, "slack", slack, allowedUsers=["U1", "U3"], approvers=["U2"])
        url = f"/api/channels/{channel['id']}/events"
        words = " ".join(f"word{i}" for i in range(400))
        stack.models.push(Turn.say(words, chunk_size=8, chunk_delay_s=0.1))
        async with httpx.AsyncClient(base_url=stack.url) as keyless:
            message = dumps(
                {
                    "type": "event_callback",
                    "event_id": "EvStop1",
                    "event": {"type": "message", "channel": "C9", "user": "U1", "text": "go on", "ts": "9.9"},
                }
            )
            assert (await keyless.post(url, content=message, headers=slack_headers(message))).status_code == 200

            def streaming() -> Message | None:
                found = [m for m in slack.in_conversation("C9") if m.buttons and m.buttons[0].startswith("stop:")]
                return found[0] if found else None

            reply = await eventually(streaming, until=lambda m: m is not None, within=30, what="a Stop button")
            assert reply is not None
            [stop] = reply.buttons

            # U3 may talk to the bot but did not ask and does not approve: refused, the reply goes on.
            outsider = stop_press("U3", stop, reply.id)
            forged = await keyless.post(url, content=outsider, headers=slack_headers(outsider, secret="no"))
            assert forged.status_code == 401
            assert (await keyless.post(url, content=outsider, headers=slack_headers(outsider))).status_code == 200
            await eventually(lambda: slack.private, until=lambda p: len(p) == 1, within=10)
            assert slack.private[0][0] == "U3" and "who asked" in slack.private[0][1]
            edits = reply.edits
            await asyncio.sleep(1.0)
            assert reply.edits > edits and reply.buttons == [stop], "the reply streams on"

            asker = stop_press("U1", stop, reply.id)
            assert (await keyless.post(url, content=asker, headers=slack_headers(asker))).status_code == 200
            await eventually(lambda: reply.buttons, until=lambda b: not b, within=30, what="the final edit")
        assert "stopped" in reply.text and words not in reply.text
        history = (await client.get(f"/api/channels/{channel['id']}/history")).json()["entries"]
        assert any(
            e["direction"] == "in" and e["text"].endswith("stopped") and e["platformUser"] == "U1" for e in history
        )
        assert any(e["direction"] == "error" and "pressed Stop" in e["text"] for e in history)
        await client.delete(f"/api/channels/{channel['id']}")
