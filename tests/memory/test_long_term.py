"""Long-term memories (popagent_memories): kinds, pins the agent cannot change, near-duplicate
merging by `remember`, retention, PATCH/DELETE semantics, session deletion keeping them, and
hybrid cross-session recall over the LongMemEval-style set."""

from __future__ import annotations

import uuid

import pytest
from chat.helpers import chat, new_session

from memory.harness import Conversations
from memory.longmem import build
from popagent_agent_runner.llm.embeddings import GatewayRetrieval
from popagent_agent_runner.memory import LONG_TERM_QUERIES
from popagent_agent_runner.memory.long_term import MemoryStore
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack


async def test_remember_merges_a_near_duplicate_and_never_changes_a_pinned_memory(
    conversations: Conversations,
) -> None:
    store = MemoryStore(conversations.pool, LONG_TERM_QUERIES)
    tag = uuid.uuid4().hex[:6]
    first = await store.remember(f"Favourite tea{tag} is jasmine", kind="preference", session_id="", turn_id="")
    assert first.outcome == "created" and first.memory.kind == "preference"
    again = await store.remember(
        f"Favourite tea{tag} is jasmine, any brand", kind="preference", session_id="", turn_id=""
    )
    assert (again.outcome, again.memory.id) == ("merged", first.memory.id)
    assert again.memory.content == f"Favourite tea{tag} is jasmine, any brand"
    unrelated = await store.remember(f"Sister{tag} lives in Oslo", kind="fact", session_id="", turn_id="")
    assert unrelated.outcome == "created" and unrelated.memory.id != first.memory.id

    pinned, _ = await store.create(f"Dentist{tag} is Dr. Okafor on Fridays", source="user", pinned=True)
    attempt = await store.remember(f"Dentist{tag} is Dr. Okafor on Mondays", kind="fact", session_id="", turn_id="")
    assert (attempt.outcome, attempt.memory.id) == ("kept", pinned.id)
    assert (await store.list(f"Dentist{tag}"))[0].content == f"Dentist{tag} is Dr. Okafor on Fridays"


async def test_retention_forgets_old_unpinned_agent_memories_only(conversations: Conversations) -> None:
    store = MemoryStore(conversations.pool, LONG_TERM_QUERIES, retention_days=30)
    tag = uuid.uuid4().hex[:6]
    old_agent = await store.remember(f"Parking {tag} is on level three", kind="fact", session_id="", turn_id="")
    pinned_agent = await store.remember(f"Gym {tag} opens at six", kind="fact", session_id="", turn_id="")
    await store.update(pinned_agent.memory.id, pinned=True)
    user, _ = await store.create(f"Bakery {tag} closes on Sundays", source="user")
    fresh = await store.remember(f"Library {tag} card expires in May", kind="fact", session_id="", turn_id="")
    await conversations.pool.execute(
        "UPDATE popagent_memories SET updated_at = now() - interval '40 days' WHERE id = ANY($1::uuid[])",
        [old_agent.memory.id, pinned_agent.memory.id, user.id],
    )
    assert await store.sweep(force=True) >= 1
    left = {m.id for m in await store.list(tag)}
    assert left == {pinned_agent.memory.id, user.id, fresh.memory.id}
    assert await MemoryStore(conversations.pool, LONG_TERM_QUERIES).sweep(force=True) == 0  # 0 days: keep everything


async def test_patch_and_delete_keep_their_semantics(stack: Stack) -> None:
    tag = uuid.uuid4().hex[:6]
    async with stack.client() as client:
        created = (
            await client.post("/api/memories", json={"content": f"Likes oolong {tag}", "kind": "preference"})
        ).json()
        assert (created["kind"], created["pinned"]) == ("preference", False)
        pinned = await client.patch(f"/api/memories/{created['id']}", json={"pinned": True})
        assert pinned.status_code == 200 and pinned.json()["pinned"] is True
        assert pinned.json()["content"] == f"Likes oolong {tag}" and pinned.json()["kind"] == "preference"
        edited = (await client.patch(f"/api/memories/{created['id']}", json={"content": f"Likes sencha {tag}"})).json()
        assert (edited["content"], edited["pinned"], edited["kind"]) == (f"Likes sencha {tag}", True, "preference")
        assert (await client.patch(f"/api/memories/{created['id']}", json={"kind": "opinion"})).status_code == 422
        assert (await client.patch(f"/api/memories/{created['id']}", json={"content": None})).status_code == 422
        assert (await client.patch(f"/api/memories/{created['id']}", json={})).status_code == 422
        assert (await client.delete(f"/api/memories/{created['id']}")).status_code == 204
        assert (await client.patch(f"/api/memories/{created['id']}", json={"pinned": False})).status_code == 404


async def test_deleting_a_session_keeps_the_memories_it_wrote(stack: Stack) -> None:
    tag = uuid.uuid4().hex[:6]
    async with stack.client() as client:
        session = await new_session(client)
        stack.models.push(
            Turn.call(ToolCall("remember", {"content": f"Prefers window seats {tag}", "kind": "preference"})),
            Turn.say("I will remember that."),
        )
        await chat(client, session, "I always prefer window seats.")
        found = (await client.get("/api/memories", params={"q": tag})).json()["memories"]
        assert [(m["sessionId"], m["kind"], m["source"]) for m in found] == [(session, "preference", "agent")]
        assert (await client.delete(f"/api/sessions/{session}")).status_code == 204
        kept = (await client.get("/api/memories", params={"q": tag})).json()["memories"]
        assert [m["id"] for m in kept] == [found[0]["id"]]


@pytest.mark.parametrize("paraphrased", [False, True], ids=["as-planted", "paraphrased"])
@pytest.mark.parametrize("embeddings", [False, True], ids=["full-text", "hybrid"])
async def test_cross_session_recall_finds_the_planted_memories(
    conversations: Conversations, embeddings: bool, paraphrased: bool
) -> None:
    data = build(seed=7, paraphrased=paraphrased)
    retrieval = GatewayRetrieval(conversations.gateway.url, "sk-memory") if embeddings else None
    store = MemoryStore(
        conversations.pool, LONG_TERM_QUERIES, retrieval=retrieval, embedding_model="fake/embed" if embeddings else ""
    )
    created = [(await store.create(planted.text, source="agent"))[0].id for planted in data.planted]
    try:
        hits = 0
        for question in data.questions:
            recalled = await store.relevant_memories(question.text, 5)
            hits += all(e.text in recalled for e in question.evidence)
    finally:
        if retrieval is not None:
            await retrieval.aclose()
        await conversations.pool.execute("DELETE FROM popagent_memories WHERE id = ANY($1::uuid[])", created)
    kind = f"{'hybrid' if embeddings else 'full text'}, {'paraphrased' if paraphrased else 'as planted'}"
    print(f"memory recall top-5 ({kind}): {hits}/{len(data.questions)}")
    assert hits / len(data.questions) >= 0.9, f"{hits}/{len(data.questions)}"
    if embeddings:
        assert conversations.gateway.embedding_requests
