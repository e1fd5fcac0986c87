"""Versions of an edited user message (issue 42): an edit of any user message keeps the branch it
leaves, a switch shows another branch (the session's UI messages and the thread the model reads),
and a retry of the same text is no version."""

from __future__ import annotations

from chat.helpers import chat, conversation_of, new_session, thread_rows, user_message
from support.model_gateway import Turn
from support.stacks import Stack


def _texts(messages: list[dict[str, object]]) -> list[str]:
    return [
        "".join(str(p.get("text", "")) for p in m["parts"] if isinstance(p, dict))  # type: ignore[union-attr]
        for m in messages
    ]


async def test_an_edit_is_a_version_and_each_version_is_its_own_branch(stack: Stack) -> None:
    stack.models.push(Turn.say("A1."), Turn.say("A2."), Turn.say("B1."), Turn.say("A3."), Turn.say("B1 again."))
    async with stack.client() as client:
        session = await new_session(client)
        first = user_message("first question")
        await chat(client, session, first)
        await chat(client, session, "second question")
        edited = {**first, "parts": [{"type": "text", "text": "edited first question"}]}
        await chat(client, session, edited)
        # The edit's request has no history: it replaces the first message.
        assert conversation_of(stack.models.requests[2]) == [("user", "edited first question")]

        shown = (await client.get(f"/api/sessions/{session}")).json()
        assert shown["messageVersions"] == [{"messageId": first["id"], "versions": 2, "shown": 2}]
        assert _texts(shown["messages"]) == ["edited first question", "B1."]

        # Version 1: the original branch, in the session and in the thread the model reads next.
        back = await client.post(f"/api/sessions/{session}/messages/{first['id']}/versions/1")
        assert back.status_code == 200, back.text
        assert _texts(back.json()["messages"]) == ["first question", "A1.", "second question", "A2."]
        assert back.json()["messageVersions"] == [{"messageId": first["id"], "versions": 2, "shown": 1}]
        rows = await thread_rows(stack, session)
        assert [role for _, role, _ in rows] == ["user", "assistant", "user", "assistant"]
        await chat(client, session, "third question")
        assert conversation_of(stack.models.requests[3]) == [
            ("user", "first question"),
            ("assistant", "A1."),
            ("user", "second question"),
            ("assistant", "A2."),
            ("user", "third question"),
        ]

        # Version 2 again: its branch; version 1 keeps the turn it gained.
        again = await client.post(f"/api/sessions/{session}/messages/{first['id']}/versions/2")
        assert _texts(again.json()["messages"]) == ["edited first question", "B1."]
        # A retry of the same text replaces the answer and is no new version.
        await chat(client, session, edited)
        after = (await client.get(f"/api/sessions/{session}")).json()
        assert after["messageVersions"] == [{"messageId": first["id"], "versions": 2, "shown": 2}]
        assert _texts(after["messages"]) == ["edited first question", "B1 again."]
        kept = await client.post(f"/api/sessions/{session}/messages/{first['id']}/versions/1")
        assert _texts(kept.json()["messages"])[-2:] == ["third question", "A3."]

        missing = await client.post(f"/api/sessions/{session}/messages/{first['id']}/versions/3")
        assert missing.status_code == 404 and "has no version 3" in missing.json()["error"]
        unknown = await client.post(f"/api/sessions/{session}/messages/nope/versions/1")
        assert unknown.status_code == 404
        assert (await client.post(f"/api/sessions/{session}/messages/{first['id']}/versions/0")).status_code == 422
