"""`recall`: exact quotes of original messages with their dates, in this thread or in every
`popagent-user` thread (retrieval_scope); and a LongMemEval-style set of >= 100 questions whose
planted evidence must be in the top 5 for at least 90 % of them (full text, and full text + embeddings)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import orjson
import pytest
from chat.helpers import chat, new_session

from memory.harness import Conversations
from memory.longmem import build
from memory.stack_helpers import memory_settings
from popagent_agent_runner.llm.embeddings import GatewayRetrieval
from popagent_agent_runner.memory.observational import QUERIES as MEMORY_QUERIES
from popagent_agent_runner.memory.observational.recall import HistorySearch
from popagent_agent_runner.service import MIGRATIONS
from support.model_gateway import ModelGateway, ToolCall, Turn
from support.stacks import Stack

DAY = dt.datetime(2026, 10, 1, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
async def own_history(
    make_database: Callable[[dict[str, Path]], Awaitable[str]],
) -> AsyncIterator[tuple[asyncpg.Pool, ModelGateway]]:
    """A database of its own, and a model server for its embeddings. A search of every
    `popagent-user` thread in the shared chat stack's database also redacted and embedded what
    other suites left there: the eleven 2 MB answers of tests/chat/test_backpressure.py alone cost
    ~20 s on an idle machine, and past pytest's 60 s on a loaded one."""
    dsn = await make_database({"agent_runner": MIGRATIONS})
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4, server_settings={"search_path": "agent_runner"})
    assert pool is not None
    try:
        async with ModelGateway(api_key="sk-memory") as gateway:
            yield pool, gateway
    finally:
        await pool.close()


async def add_thread(pool: asyncpg.Pool, messages: list[str], start: dt.datetime = DAY) -> tuple[str, dict[str, str]]:
    """A `popagent-user` thread of user messages each answered "Noted."; its id and message id by text."""
    thread_id = f"recall-{uuid.uuid4().hex[:12]}"
    await pool.execute("INSERT INTO popagent_threads (id, resource_id) VALUES ($1, 'popagent-user')", thread_id)
    rows: list[tuple[str, str, str, str, dt.datetime]] = []
    ids: dict[str, str] = {}
    for n, text in enumerate(messages):
        at = start + dt.timedelta(hours=n)
        user_id, answer_id = f"u-{uuid.uuid4().hex[:10]}", f"a-{uuid.uuid4().hex[:10]}"
        ids[text] = user_id
        user = {"ui": {"id": user_id, "role": "user", "parts": [{"type": "text", "text": text}]}, "model": []}
        answer = {
            "ui": {"id": answer_id, "role": "assistant", "parts": [{"type": "text", "text": "Noted."}]},
            "model": [],
        }
        rows.append((thread_id, user_id, "user", orjson.dumps(user).decode(), at))
        rows.append((thread_id, answer_id, "assistant", orjson.dumps(answer).decode(), at + dt.timedelta(seconds=3)))
    await pool.executemany(
        "INSERT INTO popagent_thread_messages (thread_id, id, role, content, created_at) VALUES ($1, $2, $3, $4::jsonb, $5)",
        rows,
    )
    return thread_id, ids


async def test_recall_respects_the_thread_or_all_threads_scope(conversations: Conversations) -> None:
    search = HistorySearch(conversations.pool, MEMORY_QUERIES)
    tag = uuid.uuid4().hex[:6]
    here, here_ids = await add_thread(conversations.pool, [f"My locker{tag} code is 4417.", "Something else."])
    there, there_ids = await add_thread(conversations.pool, [f"The locker{tag} at the gym is blue."])
    in_thread = await search.search(here, f"locker{tag}", 5, scope="thread")
    assert [r.message_id for r in in_thread] == [here_ids[f"My locker{tag} code is 4417."]]
    assert in_thread[0].text == f"My locker{tag} code is 4417."  # the exact message
    assert in_thread[0].created_at == DAY and in_thread[0].role == "user"
    everywhere = await search.search(here, f"locker{tag}", 5, scope="resource")
    assert {r.message_id for r in everywhere} == {*here_ids.values(), *there_ids.values()} - {
        here_ids["Something else."]
    }
    assert {r.thread_id for r in everywhere} == {here, there}


async def test_recall_never_returns_the_turn_that_asks(conversations: Conversations) -> None:
    search = HistorySearch(conversations.pool, MEMORY_QUERIES)
    tag = uuid.uuid4().hex[:6]
    thread, ids = await add_thread(
        conversations.pool, [f"Old fact about zebra{tag}.", f"Where is the zebra{tag} fact?"]
    )
    asking = ids[f"Where is the zebra{tag} fact?"]
    found = await search.search(thread, f"zebra{tag}", 5, scope="thread", asking_id=asking)
    assert [r.message_id for r in found] == [ids[f"Old fact about zebra{tag}."]]
    # Before the asking message is stored (the turn stores it while the model runs), nothing is left out.
    before = await search.search(thread, f"zebra{tag}", 5, scope="thread", asking_id="not-stored-yet")
    assert {r.message_id for r in before} == {ids[f"Old fact about zebra{tag}."], asking}


@pytest.mark.parametrize("paraphrased", [False, True], ids=["as-planted", "paraphrased"])
@pytest.mark.parametrize("embeddings", [False, True], ids=["full-text", "hybrid"])
async def test_a_longmemeval_style_set_finds_the_planted_evidence(
    own_history: tuple[asyncpg.Pool, ModelGateway], embeddings: bool, paraphrased: bool
) -> None:
    pool, gateway = own_history
    data = build(paraphrased=paraphrased)
    assert len(data.questions) >= 100
    ids: dict[str, str] = {}
    for session, messages in enumerate(data.sessions):
        _, session_ids = await add_thread(pool, messages, DAY + dt.timedelta(days=session))
        ids.update(session_ids)
    asking, _ = await add_thread(pool, [])
    retrieval = GatewayRetrieval(gateway.url, "sk-memory") if embeddings else None
    search = HistorySearch(
        pool, MEMORY_QUERIES, retrieval=retrieval, embedding_model="fake/embed" if embeddings else ""
    )
    hits: dict[str, list[bool]] = {}
    try:
        for question in data.questions:
            top = {r.message_id for r in await search.search(asking, question.text, 5, scope="resource")}
            hits.setdefault(question.kind, []).append(all(ids[e.text] in top for e in question.evidence))
    finally:
        if retrieval is not None:
            await retrieval.aclose()
    total = sum(sum(kind) for kind in hits.values()) / len(data.questions)
    by_kind = {kind: f"{sum(v)}/{len(v)}" for kind, v in hits.items()}
    print(
        f"recall top-5 ({'hybrid' if embeddings else 'full text'}, {'paraphrased' if paraphrased else 'as planted'}):"
        f" {total:.1%} {by_kind}"
    )
    assert total >= 0.9, by_kind
    assert set(hits) == {"single-session", "multi-session", "temporal", "knowledge-update"}
    if embeddings:
        assert gateway.embedding_requests


async def test_the_supervisor_recalls_an_exact_quote_through_the_stack(stack: Stack) -> None:
    tag = uuid.uuid4().hex[:6]
    async with stack.client() as client:
        session = await new_session(client)
        stack.models.push(Turn.say("Noted."))
        await chat(client, session, f"My spare key{tag} is under the third flowerpot.")
        stack.models.push(Turn.call(ToolCall("recall", {"query": f"key{tag}"})), Turn.say("Under the third flowerpot."))
        await chat(client, session, "Where did I say the spare key is?")
    result = next(m for m in stack.models.requests[-1]["messages"] if m["role"] == "tool")
    messages = orjson.loads(result["content"])["messages"]
    assert [m["text"] for m in messages] == [f"My spare key{tag} is under the third flowerpot."]
    assert messages[0]["sessionId"] == session and messages[0]["date"].startswith(str(dt.date.today().year))


async def test_the_retrieval_scope_setting_decides_what_recall_searches_through_the_stack(stack: Stack) -> None:
    tag = uuid.uuid4().hex[:6]
    fact = f"My bike{tag} lock opens with 3141."

    def recalled() -> list[dict[str, str]]:
        # The newest tool result: the history carries the earlier turns' recalls too.
        result = [m for m in stack.models.requests[-1]["messages"] if m["role"] == "tool"][-1]
        return orjson.loads(result["content"])["messages"]

    async with stack.client() as client:
        assert (await client.get("/api/settings/memory")).json()["retrievalScope"] == "thread"
        told = await new_session(client)
        stack.models.push(Turn.say("Noted."))
        await chat(client, told, fact)
        asking = await new_session(client)
        # `thread`, the default: only this conversation, which never mentioned the bike.
        stack.models.push(Turn.call(ToolCall("recall", {"query": f"bike{tag}"})), Turn.say("I do not know."))
        await chat(client, asking, "What opens my bike lock?")
        assert recalled() == []
        # `resource`: every conversation of the user, so the other session's message is found.
        async with memory_settings(client, retrievalScope="resource"):
            stack.models.push(Turn.call(ToolCall("recall", {"query": f"bike{tag}"})), Turn.say("3141."))
            await chat(client, asking, "What opens my bike lock?")
            assert [(m["text"], m["sessionId"]) for m in recalled()] == [(fact, told)]
        # And back: the change applies on the next turn both ways.
        stack.models.push(Turn.call(ToolCall("recall", {"query": f"bike{tag}"})), Turn.say("I do not know."))
        await chat(client, asking, "What opens my bike lock?")
        assert recalled() == []
