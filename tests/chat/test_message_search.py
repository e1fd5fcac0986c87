"""Full-text search over what the chats said (GET /api/search/messages), through the real stack:
words in a question or an answer find their message with an excerpt marking them; a phrase, an
excluded word and `or` work as on a search engine; an archived chat is found and says so; a deleted
one is not; a bad query is refused with a reason."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from chat.helpers import chat, new_session
from support.model_gateway import Turn
from support.stacks import Stack


async def search(client: httpx.AsyncClient, q: str, **params: Any) -> list[dict[str, Any]]:
    found = await client.get("/api/search/messages", params={"q": q, **params})
    assert found.status_code == 200, found.text
    return list(found.json()["matches"])


async def test_words_in_questions_and_answers_find_their_chat(stack: Stack) -> None:
    word = f"zebra{uuid.uuid4().hex[:8]}"
    other = f"okapi{uuid.uuid4().hex[:8]}"
    async with stack.client() as client:
        first, second = await new_session(client), await new_session(client)
        stack.models.push(Turn.say(f"The {other} lives in the forest, not with the {word}."))
        await chat(client, first, f"Where does the {word} sleep at night?")
        stack.models.push(Turn.say("Plains and grass."))
        await chat(client, second, f"Tell me about the {word} herd of the plains")

        both = await search(client, word)
        assert {(m["sessionId"], m["role"]) for m in both} >= {(first, "user"), (first, "assistant"), (second, "user")}
        [question] = [m for m in both if m["sessionId"] == first and m["role"] == "user"]
        assert question["excerpt"].startswith(f"Where does the <<{word}>> sleep at night")
        assert question["messageId"] and question["title"] is not None and question["archived"] is False

        # Only the answer says the other word; a phrase, an exclusion and `or` narrow or widen.
        [answer] = await search(client, other)
        assert (answer["sessionId"], answer["role"]) == (first, "assistant")
        assert {m["sessionId"] for m in await search(client, f'"{word} herd"')} == {second}
        assert {m["sessionId"] for m in await search(client, f"{word} -plains")} == {first}
        assert {(m["sessionId"], m["role"]) for m in await search(client, f"{other} or herd")} >= {
            (first, "assistant"),
            (second, "user"),
        }
        assert len(await search(client, word, limit=1)) == 1

        # An archived chat is found, and says so; a deleted one is gone from the results.
        assert (await client.patch(f"/api/sessions/{second}", json={"archived": True})).status_code == 200
        assert {m["archived"] for m in await search(client, f'"{word} herd"')} == {True}
        assert (await client.delete(f"/api/sessions/{first}")).status_code == 204
        assert await search(client, other) == []

        for bad in ({"q": ""}, {"q": "x" * 501}, {"q": word, "limit": 0}, {"q": word, "limit": 101}):
            refused = await client.get("/api/search/messages", params=bad)
            assert refused.status_code == 422, (bad, refused.text)
        assert (await client.get("/api/search/messages")).status_code == 422
