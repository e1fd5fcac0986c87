"""GET/POST /api/memories and PATCH/DELETE /api/memories/:id over real HTTP, and recall ranking."""

from __future__ import annotations

import uuid

from chat.helpers import chat, new_session, turn_note
from support.model_gateway import Turn
from support.stacks import Stack


async def test_memories_can_be_listed_added_searched_edited_and_deleted(stack: Stack) -> None:
    tag = uuid.uuid4().hex[:8]
    async with stack.client() as client:
        created = await client.post("/api/memories", json={"content": f"Prefers tabs over spaces {tag}"})
        assert created.status_code == 201, created.text
        memory = created.json()
        assert (memory["content"], memory["source"], memory["sessionId"]) == (
            f"Prefers tabs over spaces {tag}",
            "user",
            None,
        )
        # The same fact again (ignoring case) is the same memory, not a copy.
        again = await client.post("/api/memories", json={"content": f"prefers TABS over spaces {tag}"})
        assert (again.status_code, again.json()["id"]) == (200, memory["id"])

        listed = (await client.get("/api/memories")).json()["memories"]
        assert listed[0]["id"] == memory["id"]
        found = (await client.get("/api/memories", params={"q": tag})).json()["memories"]
        assert [m["id"] for m in found] == [memory["id"]]
        assert (await client.get("/api/memories", params={"q": f"nothing-like-{tag}"})).json()["memories"] == []

        patched = await client.patch(f"/api/memories/{memory['id']}", json={"content": f"Prefers spaces {tag}"})
        assert patched.status_code == 200
        assert patched.json()["content"] == f"Prefers spaces {tag}"
        assert patched.json()["updatedAt"] >= memory["updatedAt"]

        assert (await client.delete(f"/api/memories/{memory['id']}")).status_code == 204
        assert (await client.delete(f"/api/memories/{memory['id']}")).status_code == 404
        assert (await client.patch(f"/api/memories/{memory['id']}", json={"content": "x"})).status_code == 404
        assert (await client.get("/api/memories", params={"q": tag})).json()["memories"] == []


async def test_memory_requests_are_checked(stack: Stack) -> None:
    async with stack.client() as client:
        for body in ({}, {"content": ""}, {"content": "x" * 2001}, {"content": "ok", "source": "agent"}):
            response = await client.post("/api/memories", json=body)
            assert response.status_code == 422, body
        assert (await client.post("/api/memories", json={"content": "   "})).status_code == 400
        assert (await client.patch("/api/memories/not-a-uuid", json={"content": "x"})).status_code == 404
        assert (await client.get("/api/memories", params={"limit": 0})).status_code == 422
        assert (await client.get("/api/memories", params={"sort": "old"})).status_code == 422
        unauthenticated = await client.get("/api/memories", headers={"x-popagent-key": "wrong"})
        assert unauthenticated.status_code == 401


async def test_recall_injects_only_memories_that_share_words_with_the_prompt_best_first(stack: Stack) -> None:
    tag = uuid.uuid4().hex[:6]
    async with stack.client() as client:
        for content in (
            f"Deploys go to the staging cluster {tag} first.",
            f"The staging cluster {tag} is in Frankfurt; the production cluster {tag} too.",
            "Lunch is at noon.",
        ):
            assert (await client.post("/api/memories", json={"content": content})).status_code == 201
        stack.models.push(Turn.say("ok"))
        session = await new_session(client)
        await chat(client, session, f"where is the cluster {tag}?")
    note = turn_note(stack.models.requests[0])
    assert "Long-term memories that may be relevant" in note
    recalled = [line for line in note.splitlines() if line.startswith("- ") and tag in line]
    assert recalled == [
        f"- The staging cluster {tag} is in Frankfurt; the production cluster {tag} too.",
        f"- Deploys go to the staging cluster {tag} first.",
    ]
    assert "Lunch is at noon." not in note
