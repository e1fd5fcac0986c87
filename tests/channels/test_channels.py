"""Native channels on the real stack against platform stand-ins (tests/channels/standins.py): signed
deliveries only, each processed once, one session per (connection, conversation, thread), replies
posted then edited to the complete answer, split beyond the limit, 429s waited out, and no bot token
in any answer."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx

from channels.helpers import connect, deliver_telegram, slack_headers, telegram_update
from channels.standins import dumps, serving
from support.model_gateway import Turn
from support.stacks import Stack
from support.waiting import eventually


async def test_telegram_forged_deliveries_are_refused_and_a_replay_is_answered_once(stack: Stack) -> None:
    token = f"{uuid.uuid4().int % 10**9}:tg-token-{uuid.uuid4().hex}"
    async with stack.client() as client, serving("telegram", token) as telegram:
        channel = await connect(client, "telegram", telegram)
        # No API key is needed on the webhook, and a wrong secret token is 401 before anything is read.
        async with httpx.AsyncClient(base_url=stack.url) as keyless:
            forged = await deliver_telegram(keyless, channel["id"], telegram_update(1, 500, "hi"), secret="wrong")
            garbage = await keyless.post(
                f"/api/channels/{channel['id']}/events",
                content=b"{not json",
                headers={"X-Telegram-Bot-Api-Secret-Token": "wrong"},
            )
        assert forged.status_code == 401 and garbage.status_code == 401, (forged.text, garbage.text)
        async with stack.db() as conn:
            for table in ("popagent_channel_events", "popagent_channel_conversations"):
                assert await conn.fetchval(f"SELECT count(*) FROM {table} WHERE connection_id = $1", channel["id"]) == 0

        stack.models.push(Turn.say("The answer is **42**.", chunk_size=4, chunk_delay_s=0.05))
        update = telegram_update(7, 500, "What is the answer?")
        async with httpx.AsyncClient(base_url=stack.url) as keyless:
            first = await deliver_telegram(keyless, channel["id"], update)
            replayed = await deliver_telegram(keyless, channel["id"], update)
        assert first.status_code == 200 and replayed.status_code == 200

        def final() -> list[str]:
            return [m.text for m in telegram.in_conversation("500")]

        await eventually(final, until=lambda texts: texts == ["The answer is *42*\\."], within=30)
        history = await eventually(
            lambda: client.get(f"/api/channels/{channel['id']}/history"),
            until=lambda r: any(e["direction"] == "out" for e in r.json()["entries"]),
            within=30,
        )
        # One turn: the replay was taken in once.
        async with stack.db() as conn:
            turns = await conn.fetchval(
                "SELECT count(*) FROM popagent_turns t JOIN popagent_channel_conversations c"
                " ON c.session_id = t.session_id WHERE c.connection_id = $1",
                channel["id"],
            )
            assert turns == 1
        sends = [call for call in telegram.calls if call[0] == "sendMessage"]
        assert len(sends) == 1
        answers = [
            history.text,
            (await client.get("/api/channels")).text,
            (await client.get(f"/api/channels/{channel['id']}")).text,
        ]
        assert all(token not in text for text in answers)
        assert (await client.delete(f"/api/channels/{channel['id']}")).status_code == 204


async def test_two_connections_with_the_same_chat_id_never_share_a_session(stack: Stack) -> None:
    async with stack.client() as client, serving("telegram", "1:a") as one, serving("telegram", "2:b") as two:
        first = await connect(client, "telegram", one)
        second = await connect(client, "telegram", two)
        stack.models.push(Turn.say("from one"), Turn.say("from two"))
        async with httpx.AsyncClient(base_url=stack.url) as keyless:
            assert (await deliver_telegram(keyless, first["id"], telegram_update(1, 99, "a"))).status_code == 200
            await eventually(
                lambda: [m.text for m in one.in_conversation("99")], until=lambda t: t == ["from one"], within=30
            )
            assert (await deliver_telegram(keyless, second["id"], telegram_update(1, 99, "b"))).status_code == 200
            await eventually(
                lambda: [m.text for m in two.in_conversation("99")], until=lambda t: t == ["from two"], within=30
            )
        async with stack.db() as conn:
            sessions = await conn.fetch("SELECT connection_id, session_id FROM popagent_channel_conversations")
        assert len({row["session_id"] for row in sessions}) == 2
        for channel in (first, second):
            await client.delete(f"/api/channels/{channel['id']}")


async def test_an_answer_over_the_limit_is_split_and_a_429_is_waited_out(stack: Stack) -> None:
    long_answer = " ".join(f"word{i}" for i in range(1500))  # about 12,000 characters: three Telegram messages
    async with stack.client() as client, serving("telegram", "3:c") as telegram:
        channel = await connect(client, "telegram", telegram)
        telegram.rate_limited["sendMessage"] = 1
        stack.models.push(Turn.say(long_answer, chunk_size=400))
        async with httpx.AsyncClient(base_url=stack.url) as keyless:
            await deliver_telegram(keyless, channel["id"], telegram_update(5, 77, "long please"))
        texts = await eventually(
            lambda: [m.text for m in telegram.in_conversation("77")],
            until=lambda t: len(t) >= 3 and "word1499" in t[-1],
            within=40,
        )
        assert all(len(text) <= 4096 for text in texts)
        assert " ".join(" ".join(texts).split()) == long_answer
        limited = [c for c in telegram.calls if c[0] == "sendMessage"]
        assert len(limited) == len(texts) + 1  # the refused first one, retried
        await client.delete(f"/api/channels/{channel['id']}")


async def test_slack_signatures_handshake_and_a_reply_after_a_long_gap_arrive_once(stack: Stack) -> None:
    token = "xoxb-" + uuid.uuid4().hex
    async with stack.client() as client, serving("slack", token) as slack:
        channel = await connect(client, "slack", slack, botUserId="UBOT")
        url = f"/api/channels/{channel['id']}/events"
        challenge = dumps({"type": "url_verification", "challenge": "abc123", "token": "x"})
        async with httpx.AsyncClient(base_url=stack.url) as keyless:
            stale = await keyless.post(url, content=challenge, headers=slack_headers(challenge, at=time.time() - 600))
            forged = await keyless.post(url, content=challenge, headers=slack_headers(challenge, secret="other"))
            verified = await keyless.post(url, content=challenge, headers=slack_headers(challenge))
        assert stale.status_code == 401 and forged.status_code == 401
        assert verified.status_code == 200 and verified.json() == {"challenge": "abc123"}

        def event(event_id: str, text: str, **more: Any) -> bytes:
            return dumps(
                {
                    "type": "event_callback",
                    "event_id": event_id,
                    "event": {"type": "message", "channel": "C1", "user": "U1", "text": text, "ts": "1.1", **more},
                }
            )

        # The answer's first words, a long quiet gap (a slow tool), then the rest; the first post is rate limited.
        slack.rate_limited["chat.postMessage"] = 1
        stack.models.push(Turn.say("Part one. " + "then the tail, all of it.", chunk_size=10, chunk_delay_s=0.3))
        async with httpx.AsyncClient(base_url=stack.url) as keyless:
            own = event("Ev0", "echo", bot_id="B1", user="UBOT")
            assert (await keyless.post(url, content=own, headers=slack_headers(own))).status_code == 200
            body = event("Ev1", "hello")
            await keyless.post(url, content=body, headers=slack_headers(body))
            await keyless.post(url, content=body, headers=slack_headers(body))
        texts = await eventually(
            lambda: [m.text for m in slack.in_conversation("C1")],
            until=lambda t: t == ["Part one. then the tail, all of it."],
            within=30,
        )
        assert texts and slack.messages[next(iter(slack.messages))].thread == "1.1"
        assert sum(1 for call in slack.calls if call[0] == "chat.postMessage") == 2  # the 429 and its retry
        await client.delete(f"/api/channels/{channel['id']}")
