"""A reply relayed from the turn's log (docs/channels.md, Replies): a relay whose agent-runner died
(its lease passed) is taken over by another runner, which reads the turn's log from its first batch
and goes on editing the message already posted, so the reply ends complete, in one message, once."""

from __future__ import annotations

import asyncio
import uuid

from chat.helpers import chat, new_session

from channels.helpers import connect
from channels.standins import Message, serving
from support.model_gateway import Turn
from support.stacks import Stack
from support.waiting import eventually

ANSWER = "One two three four five six seven eight nine ten."


async def test_a_relay_whose_runner_died_is_taken_over_and_finishes_the_same_message(stack: Stack) -> None:
    async with stack.client() as client, serving("slack", "xoxb-" + uuid.uuid4().hex) as slack:
        channel = await connect(client, "slack", slack)
        session = await new_session(client)
        stack.models.push(Turn.say(ANSWER, chunk_size=3, chunk_delay_s=0.15))
        turn = asyncio.create_task(chat(client, session, "count to ten"))

        async def running_turn() -> str | None:
            async with stack.db() as conn:
                return await conn.fetchval(
                    "SELECT id FROM popagent_turns WHERE session_id = $1 AND status = 'running'", session
                )

        turn_id = await eventually(running_turn, until=lambda found: found is not None, within=20)
        # What a runner that died mid-reply leaves: its first words posted, its relay's lease passed.
        slack.messages["900.000100"] = Message("900.000100", "C9", "1.1", "One two …")
        async with stack.db() as conn:
            await conn.execute(
                "INSERT INTO popagent_channel_relays (turn_id, connection_id, conversation, thread, reply_thread,"
                " session_id, message_id, runner_id, lease_until)"
                " VALUES ($1, $2, 'C9', '1.1', '1.1', $3, '900.000100', 'a-runner-that-died', now() - interval '1 s')",
                turn_id,
                channel["id"],
                session,
            )
        await asyncio.wait_for(turn, 30)
        texts = await eventually(
            lambda: [m.text for m in slack.in_conversation("C9")], until=lambda t: t == [ANSWER], within=20
        )
        assert texts == [ANSWER] and slack.messages["900.000100"].edits >= 1
        assert not any(call[0] == "chat.postMessage" for call in slack.calls)
        async with stack.db() as conn:
            relay = await conn.fetchrow(
                "SELECT runner_id, finished_at FROM popagent_channel_relays WHERE turn_id = $1", turn_id
            )
        assert relay is not None and relay["runner_id"] != "a-runner-that-died" and relay["finished_at"] is not None
        await client.delete(f"/api/channels/{channel['id']}")
