"""Approvals as buttons (docs/channels.md, Approvals) on the real stack against the Slack and Telegram
stand-ins: a channel turn whose tool call asks posts a card with Approve / Deny / Allow for this
session; a press by anyone but the connection's approvers (the platform's signed user id) is refused
and changes nothing; an approver's press or reply answers the approval through the approvals store,
the turn goes on, and the card is edited to its outcome with its buttons gone."""

from __future__ import annotations

import asyncio
import urllib.parse
import uuid

import httpx
from chat.approvals import supervisor_policy

from channels.helpers import (
    WRITE,
    approval_states,
    card_posted,
    channel_workspace,
    connect,
    deliver_telegram,
    slack_headers,
    telegram_update,
)
from channels.standins import dumps, serving
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack
from support.waiting import eventually


def slack_press(user: str, value: str, card_ts: str) -> bytes:
    payload = {
        "type": "block_actions",
        "user": {"id": user},
        "channel": {"id": "C7"},
        "container": {"type": "message", "message_ts": card_ts, "channel_id": "C7"},
        "actions": [{"type": "button", "action_id": "popagent_" + value.split(":")[0], "value": value}],
    }
    return urllib.parse.urlencode({"payload": dumps(payload).decode()}).encode()


async def test_slack_card_refuses_a_non_approver_and_an_approvers_press_resumes_the_turn(stack: Stack) -> None:
    async with stack.client() as client, serving("slack", "xoxb-" + uuid.uuid4().hex) as slack:
        workspace, folder = await channel_workspace(stack, client)
        channel = await connect(
            client, "slack", slack, allowedUsers=["U1", "U2"], approvers=["U2"], workspaceId=workspace
        )
        url = f"/api/channels/{channel['id']}/events"
        stack.models.push(
            Turn.call(ToolCall(WRITE, {"path": "card.txt", "content": "pressed\n"}, id="w1")),
            Turn.say("Written after the press.", chunk_size=4, chunk_delay_s=0.02),
        )
        async with (
            supervisor_policy(client, [{"tool": WRITE, "decision": "ask"}]),
            httpx.AsyncClient(base_url=stack.url) as keyless,
        ):
            message = dumps(
                {
                    "type": "event_callback",
                    "event_id": "EvA1",
                    "event": {"type": "message", "channel": "C7", "user": "U1", "text": "write it", "ts": "5.5"},
                }
            )
            assert (await keyless.post(url, content=message, headers=slack_headers(message))).status_code == 200
            card = await card_posted(slack, "C7")
            [approve, deny, session] = card.buttons
            assert (approve.split(":")[0], deny.split(":")[0], session.split(":")[0]) == ("once", "deny", "session")
            assert WRITE in card.text and card.thread == "5.5"

            # A forged press is refused before anything is read; a non-approver's press changes nothing.
            forged = slack_press("U2", approve, card.id)
            refused = await keyless.post(url, content=forged, headers=slack_headers(forged, secret="not-it"))
            assert refused.status_code == 401
            outsider = slack_press("U1", approve, card.id)
            assert (await keyless.post(url, content=outsider, headers=slack_headers(outsider))).status_code == 200
            await eventually(lambda: slack.private, until=lambda p: len(p) == 1, within=10)
            assert slack.private[0][0] == "U1" and "approvers" in slack.private[0][1]
            await asyncio.sleep(1.0)  # the gate polls twice a second: it would have moved by now
            assert await approval_states(stack, channel["id"]) == [("pending", None)]
            assert card.buttons and not (folder / "card.txt").exists()

            pressed = slack_press("U2", approve, card.id)
            assert (await keyless.post(url, content=pressed, headers=slack_headers(pressed))).status_code == 200
            texts = await eventually(
                lambda: [m.text for m in slack.in_conversation("C7") if not m.buttons],
                until=lambda t: "Written after the press." in t,
                within=30,
            )
        assert await approval_states(stack, channel["id"]) == [("approved", "slack:U2")]
        assert (folder / "card.txt").read_text() == "pressed\n"
        assert not card.buttons and "approved by slack:U2" in card.text
        assert texts.count("Written after the press.") == 1
        history = (await client.get(f"/api/channels/{channel['id']}/history")).json()["entries"]
        assert any(e["direction"] == "error" and "not among the approvers" in e["text"] for e in history)
        await client.delete(f"/api/channels/{channel['id']}")


async def test_telegram_card_refuses_a_non_approver_and_an_approvers_reply_denies(stack: Stack) -> None:
    async with stack.client() as client, serving("telegram", "9:tg-" + uuid.uuid4().hex) as telegram:
        workspace, folder = await channel_workspace(stack, client)
        channel = await connect(
            client, "telegram", telegram, allowedUsers=["42", "43"], approvers=["43"], workspaceId=workspace
        )
        stack.models.push(
            Turn.call(ToolCall(WRITE, {"path": "denied.txt", "content": "never\n"}, id="w2")),
            Turn.say("Not written then.", chunk_size=4, chunk_delay_s=0.02),
        )
        async with (
            supervisor_policy(client, [{"tool": WRITE, "decision": "ask"}]),
            httpx.AsyncClient(base_url=stack.url) as keyless,
        ):
            await deliver_telegram(keyless, channel["id"], telegram_update(31, 600, "write it"))
            card = await card_posted(telegram, "600")
            assert len(card.buttons) == 3 and all(len(b.encode()) <= 64 for b in card.buttons)

            press = {
                "update_id": 32,
                "callback_query": {
                    "id": "cbq-1",
                    "from": {"id": 42, "is_bot": False, "first_name": "Ada"},
                    "message": {"message_id": int(card.id), "chat": {"id": 600, "type": "private"}},
                    "data": card.buttons[0],
                },
            }
            assert (await deliver_telegram(keyless, channel["id"], press)).status_code == 200
            await eventually(lambda: telegram.private, until=lambda p: len(p) == 1, within=10)
            assert telegram.private[0][0] == "cbq-1" and "approvers" in telegram.private[0][1]
            await asyncio.sleep(1.0)
            assert await approval_states(stack, channel["id"]) == [("pending", None)]
            assert card.buttons

            # The approver answers with a word instead of a button.
            await deliver_telegram(keyless, channel["id"], telegram_update(33, 600, "Deny", user=43))
            await eventually(
                lambda: [m.text for m in telegram.in_conversation("600") if not m.buttons],
                until=lambda t: any("Not written then" in text for text in t),
                within=30,
            )
        assert await approval_states(stack, channel["id"]) == [("denied", "telegram:43")]
        assert not (folder / "denied.txt").exists()
        assert not card.buttons and "denied by telegram:43" in card.text
        await client.delete(f"/api/channels/{channel['id']}")
