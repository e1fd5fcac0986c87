"""Discord (docs/channels.md) against a stand-in of its REST API: interactions signed with Ed25519
(a test key, PyNaCl) are the only way in, a forged or missing signature is 401 before anything is
read, PING is answered with PONG, a slash command's reply is posted and edited in the channel, and an
approval card's buttons answer only for the connection's approvers (the interaction's member)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
from chat.approvals import supervisor_policy
from nacl.signing import SigningKey

from channels.helpers import WRITE, approval_states, card_posted, channel_workspace, connect
from channels.standins import dumps, serving
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack
from support.waiting import eventually

APPLICATION_KEY = SigningKey.generate()


def signed(body: bytes, key: SigningKey = APPLICATION_KEY) -> dict[str, str]:
    timestamp = str(int(time.time()))
    signature = key.sign(timestamp.encode() + body).signature.hex()
    return {"X-Signature-Ed25519": signature, "X-Signature-Timestamp": timestamp, "Content-Type": "application/json"}


def interaction(kind: int, user: str, **more: Any) -> bytes:
    return dumps(
        {
            "id": f"int-{uuid.uuid4().hex[:12]}",
            "application_id": "app-1",
            "type": kind,
            "channel_id": "D1",
            "guild_id": "G1",
            "member": {"user": {"id": user, "username": user}},
            "token": "interaction-token",
            "version": 1,
            **more,
        }
    )


async def test_discord_interactions_are_signed_and_an_approvers_button_resumes_the_turn(stack: Stack) -> None:
    async with stack.client() as client, serving("discord", "discord-bot-" + uuid.uuid4().hex) as discord:
        workspace, folder = await channel_workspace(stack, client)
        channel = await connect(
            client,
            "discord",
            discord,
            credentials={"botToken": discord.token, "publicKey": APPLICATION_KEY.verify_key.encode().hex()},
            allowedUsers=["U77", "U78"],
            approvers=["U78"],
            workspaceId=workspace,
        )
        url = f"/api/channels/{channel['id']}/events"
        async with httpx.AsyncClient(base_url=stack.url) as keyless:
            ping = dumps({"id": "ping-1", "type": 1, "application_id": "app-1", "token": "t", "version": 1})
            assert (
                await keyless.post(url, content=ping, headers=signed(ping, SigningKey.generate()))
            ).status_code == 401
            assert (await keyless.post(url, content=ping)).status_code == 401
            pong = await keyless.post(url, content=ping, headers=signed(ping))
            assert pong.status_code == 200 and pong.json() == {"type": 1}

            stack.models.push(
                Turn.call(ToolCall(WRITE, {"path": "discord.txt", "content": "pressed on discord\n"}, id="w3")),
                Turn.say("Done on Discord.", chunk_size=4, chunk_delay_s=0.02),
            )
            async with supervisor_policy(client, [{"tool": WRITE, "decision": "ask"}]):
                command = interaction(
                    2,
                    "U77",
                    data={"name": "ask", "type": 1, "options": [{"name": "prompt", "type": 3, "value": "write it"}]},
                )
                answered = await keyless.post(url, content=command, headers=signed(command))
                assert answered.status_code == 200, answered.text
                assert answered.json() == {"type": 4, "data": {"content": "> write it"}}
                card = await card_posted(discord, "D1")
                assert [b.split(":")[0] for b in card.buttons] == ["once", "deny", "session"]

                def press(user: str) -> bytes:
                    return interaction(
                        3,
                        user,
                        message={"id": card.id, "channel_id": "D1"},
                        data={"custom_id": card.buttons[0], "component_type": 2},
                    )

                outsider = press("U77")
                refused = await keyless.post(url, content=outsider, headers=signed(outsider))
                assert refused.status_code == 200
                assert refused.json()["type"] == 4 and refused.json()["data"]["flags"] == 64
                assert "approvers" in refused.json()["data"]["content"]
                await asyncio.sleep(1.0)
                assert await approval_states(stack, channel["id"]) == [("pending", None)]

                approver = press("U78")
                taken = await keyless.post(url, content=approver, headers=signed(approver))
                assert taken.status_code == 200
                update = taken.json()
                assert update["type"] == 7 and update["data"]["components"] == []
                assert "approved by discord:U78" in update["data"]["content"]
                await eventually(
                    lambda: [m.text for m in discord.in_conversation("D1") if not m.buttons],
                    until=lambda t: "Done on Discord." in t,
                    within=30,
                )
        assert await approval_states(stack, channel["id"]) == [("approved", "discord:U78")]
        assert (folder / "discord.txt").read_text() == "pressed on discord\n"
        await client.delete(f"/api/channels/{channel['id']}")
