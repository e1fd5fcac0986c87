"""Matrix against a real homeserver (docs/channels.md, Matrix): Synapse on loopback with SQLite, a bot
user and people registered through its shared-secret admin API, and the conversation held through the
client-server API as a person's client would hold it: the bot joins a room it is invited to by an
allowed user, a question gets a reply in its thread that streams as edits (m.replace), an approval card
is answered by an approver's reaction (another person's reaction changes nothing), a sync loop resumed
from an older point (a runner taking the loop over) answers nothing twice, and a task's result is
posted to the room."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from chat.approvals import supervisor_policy

from channels.helpers import WRITE, approval_states, channel_workspace
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack
from support.synapse import Homeserver, MatrixUser, synapse
from support.waiting import eventually

# Synapse takes 10-30 s to start on a loaded machine; the conversation waits on a real homeserver's sync.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def homeserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Homeserver]:
    with synapse(tmp_path_factory.mktemp("synapse")) as server:
        yield server


def _relation(event: dict[str, Any]) -> dict[str, Any]:
    return dict(event.get("content", {}).get("m.relates_to") or {})


def replies_in_thread(events: list[dict[str, Any]], bot: str, root: str) -> list[dict[str, Any]]:
    """The bot's messages in the thread of `root` (not its edits), oldest first."""
    return [
        e
        for e in events
        if e["sender"] == bot
        and e["type"] == "m.room.message"
        and _relation(e).get("rel_type") == "m.thread"
        and _relation(e).get("event_id") == root
    ]


def shown(events: list[dict[str, Any]], message_id: str) -> str:
    """What a client shows for a message: its newest edit's new content, else its own body."""
    body = next(e["content"].get("body", "") for e in events if e["event_id"] == message_id)
    for e in events:
        if _relation(e).get("rel_type") == "m.replace" and _relation(e).get("event_id") == message_id:
            body = e["content"]["m.new_content"]["body"]
    return str(body)


def edits_of(events: list[dict[str, Any]], message_id: str) -> list[dict[str, Any]]:
    return [
        e for e in events if _relation(e).get("rel_type") == "m.replace" and _relation(e).get("event_id") == message_id
    ]


async def timeline(
    user: MatrixUser, room: str, *, until: Callable[[list[dict[str, Any]]], object], within: float = 60, what: str = ""
) -> list[dict[str, Any]]:
    """The room's timeline as `user` reads it, once `until` holds for it."""

    async def read() -> list[dict[str, Any]]:
        return await user.events(room)

    found: list[dict[str, Any]] = await eventually(read, until=until, within=within, what=what)
    return found


async def sync_started(stack: Stack, channel_id: str) -> str:
    async def since() -> str:
        async with stack.db() as conn:
            return str(
                await conn.fetchval("SELECT since FROM popagent_channel_syncs WHERE connection_id = $1", channel_id)
                or ""
            )

    return await eventually(since, within=60, what="the Matrix sync loop's first sync")


async def test_a_matrix_room_conversation_streams_asks_by_reaction_and_gets_a_tasks_result(
    stack: Stack, homeserver: Homeserver, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:6]
    bot = homeserver.register(f"popbot{suffix}")
    ada = homeserver.register(f"ada{suffix}")
    eve = homeserver.register(f"eve{suffix}")
    async with stack.client() as client:
        workspace, folder = await channel_workspace(stack, client)
        created = await client.post(
            "/api/channels",
            json={
                "name": f"matrix-{suffix}",
                "platform": "matrix",
                "credentials": {"botToken": bot.token},
                "botUserId": bot.user_id,
                "apiBaseUrl": homeserver.url,
                "allowedUsers": [ada.user_id, eve.user_id],
                "approvers": [ada.user_id],
                "workspaceId": workspace,
            },
        )
        assert created.status_code == 201, created.text
        channel = created.json()
        assert channel["credentialsSet"] and "botToken" not in created.text and bot.token not in created.text
        first_since = await sync_started(stack, channel["id"])

        # Matrix deliveries come from the bot's own sync, never a webhook.
        async with httpx.AsyncClient(base_url=stack.url) as keyless:
            webhook = await keyless.post(f"/api/channels/{channel['id']}/events", content=b"{}")
            assert webhook.status_code >= 400

        room = await ada.create_room([bot.user_id, eve.user_id])
        await eve.join(room)
        await eventually(lambda: ada.members(room), until=lambda m: bot.user_id in m, within=30, what="bot joined")

        # A question: the reply streams into one message in the question's thread, edited to the answer.
        answer = "The homeserver answered every question about threads, edits and reactions in order."
        stack.models.push(Turn.say(answer, chunk_size=6, chunk_delay_s=0.05))
        question = await ada.say(room, "how do threads work?")
        events = await timeline(
            ada,
            room,
            until=lambda ev: any(
                shown(ev, r["event_id"]) == answer for r in replies_in_thread(ev, bot.user_id, question)
            ),
            within=60,
            what="the streamed answer",
        )
        [reply] = replies_in_thread(events, bot.user_id, question)
        edits = edits_of(events, reply["event_id"])
        assert len(edits) >= 2, "the reply streamed as edits"
        assert edits[-1]["content"]["m.new_content"]["body"] == answer
        assert reply["content"]["msgtype"] == "m.notice"
        assert "<p>" in edits[-1]["content"]["m.new_content"]["formatted_body"]

        # An approval in the same thread: the card carries the bot's three reactions; Eve's does nothing.
        stack.models.push(
            Turn.call(ToolCall(WRITE, {"path": "matrix.txt", "content": "reacted\n"}, id="m1")),
            Turn.say("Written after the reaction."),
        )
        async with supervisor_policy(client, [{"tool": WRITE, "decision": "ask"}]):
            await ada.say(room, "write it", thread=question)

            def card_of(ev: list[dict[str, Any]]) -> dict[str, Any] | None:
                cards = [
                    e
                    for e in replies_in_thread(ev, bot.user_id, question)
                    if "waits for approval" in e["content"].get("body", "")
                ]
                return cards[0] if cards else None

            events = await timeline(ada, room, until=lambda ev: card_of(ev) is not None, within=60, what="the card")
            card = card_of(events)
            assert card is not None
            seeded = await timeline(
                ada,
                room,
                until=lambda ev: (
                    len(
                        [
                            e
                            for e in ev
                            if e["type"] == "m.reaction" and _relation(e).get("event_id") == card["event_id"]
                        ]
                    )
                    == 3
                ),
                within=30,
            )
            keys = {_relation(e)["key"] for e in seeded if _relation(e).get("event_id") == card["event_id"]}
            assert keys == {"✅", "❌", "🔁"}

            await eve.react(room, card["event_id"], "✅")
            await timeline(
                ada,
                room,
                until=lambda ev: any(
                    "approvers" in e["content"].get("body", "") for e in ev if e["sender"] == bot.user_id
                ),
                within=30,
                what="the refusal of Eve's reaction",
            )
            await asyncio.sleep(1.0)  # the gate polls twice a second: it would have moved by now
            assert await approval_states(stack, channel["id"]) == [("pending", None)]
            assert not (folder / "matrix.txt").exists()

            await ada.react(room, card["event_id"], "✅")
            events = await timeline(
                ada,
                room,
                until=lambda ev: any(
                    shown(ev, r["event_id"]) == "Written after the reaction."
                    for r in replies_in_thread(ev, bot.user_id, question)
                ),
                within=60,
                what="the answer after the reaction",
            )
        assert await approval_states(stack, channel["id"]) == [("approved", f"matrix:{ada.user_id}")]
        assert (folder / "matrix.txt").read_text() == "reacted\n"
        assert f"approved by matrix:{ada.user_id}" in shown(events, card["event_id"])

        # The card's "buttons" are gone: the bot's reactions on it are redacted (their keys emptied),
        # which the bot does beside the answer, so it may land just after it.
        def bot_reactions(ev: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [e for e in ev if e["type"] == "m.reaction" and e["sender"] == bot.user_id]

        events = await timeline(
            ada,
            room,
            until=lambda ev: len(bot_reactions(ev)) == 3 and all(e["content"] == {} for e in bot_reactions(ev)),
            within=30,
            what="the bot's reactions redacted",
        )

        # A runner taking the loop over resumes from an older point: everything since is delivered again,
        # and nothing is answered twice.
        replies_before = len(replies_in_thread(events, bot.user_id, question))
        async with stack.db() as conn:
            await conn.execute(
                "UPDATE popagent_channel_syncs SET since = $2, runner_id = 'a-runner-that-died',"
                " lease_until = now() - interval '1 second' WHERE connection_id = $1",
                channel["id"],
                first_since,
            )
        await eventually(
            lambda: sync_started(stack, channel["id"]), until=lambda since: since != first_since, within=60
        )
        stack.models.push(Turn.say("Only this one is new."))
        marker = await ada.say(room, "one more")
        events = await timeline(
            ada,
            room,
            until=lambda ev: any(
                shown(ev, r["event_id"]) == "Only this one is new." for r in replies_in_thread(ev, bot.user_id, marker)
            ),
            within=60,
        )
        assert len(replies_in_thread(events, bot.user_id, question)) == replies_before

        # A task naming the room: its result is posted there.
        stack.models.push(Turn.say("The weekly **summary**."))
        task = await client.post(
            "/api/tasks",
            json={
                "prompt": "Summarise the week.",
                "workspaceId": workspace,
                "channel": {"connectionId": channel["id"], "conversation": room},
            },
        )
        assert task.status_code == 201, task.text
        events = await timeline(
            ada,
            room,
            until=lambda ev: any(
                "The weekly **summary**." in e["content"].get("body", "") for e in ev if e["sender"] == bot.user_id
            ),
            within=60,
            what="the task's result",
        )
        posted = next(e for e in events if "The weekly **summary**." in e["content"].get("body", ""))
        assert task.json()["id"] in posted["content"]["body"]
        assert "<strong>summary</strong>" in posted["content"]["formatted_body"]
        await client.delete(f"/api/channels/{channel['id']}")


async def test_an_invite_from_someone_not_allowed_is_not_joined(stack: Stack, homeserver: Homeserver) -> None:
    suffix = uuid.uuid4().hex[:6]
    bot = homeserver.register(f"popbot{suffix}")
    mallory: MatrixUser = homeserver.register(f"mallory{suffix}")
    async with stack.client() as client:
        created = await client.post(
            "/api/channels",
            json={
                "name": f"matrix-{suffix}",
                "platform": "matrix",
                "credentials": {"botToken": bot.token},
                "botUserId": bot.user_id,
                "apiBaseUrl": homeserver.url,
                "allowedUsers": ["@someone-else:localhost"],
            },
        )
        assert created.status_code == 201, created.text
        channel = created.json()
        await sync_started(stack, channel["id"])
        room = await mallory.create_room([bot.user_id])

        async def history() -> list[dict[str, Any]]:
            return list((await client.get(f"/api/channels/{channel['id']}/history")).json()["entries"])

        entries: list[dict[str, Any]] = await eventually(
            history, until=lambda h: any("not among the allowed users" in e["text"] for e in h), within=30
        )
        assert entries[0]["direction"] == "error" and entries[0]["conversation"] == room
        assert bot.user_id not in await mallory.members(room)

        missing = await client.post(
            "/api/channels",
            json={"name": f"m2-{suffix}", "platform": "matrix", "credentials": {"botToken": bot.token}},
        )
        assert missing.status_code == 400 and "apiBaseUrl" in missing.text
        await client.delete(f"/api/channels/{channel['id']}")
