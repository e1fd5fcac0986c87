"""A PostgreSQL stopped while a chat turn streams (RELIABILITY row 8, issue 22 finding 3): the
turn's commit is retried with backoff, so the answer the user saw is stored once the database
is back, with the prompt. Runs on a PostgreSQL of its own (never the suite's shared server)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from chat.helpers import chat, new_session, recorded_turn, text_of

from popagent_dev.embedded import StoppablePostgres, stoppable_postgres
from support.model_gateway import Turn
from support.stacks import Stack, StackSpec, start_stack
from support.waiting import eventually

# No hooks: the hooks service audits every dispatch in the database this test stops.
OUTAGE_STACK = StackSpec("outage", {}, frozenset({"gateway"}))
OUTAGE_S = 4.0


@pytest.fixture
async def outage(
    tmp_path: Path, internal_credentials: tuple[dict[str, str], str]
) -> AsyncIterator[tuple[Stack, StoppablePostgres]]:
    with stoppable_postgres() as postgres:
        async with start_stack(postgres.dsn, internal_credentials, tmp_path / "stack", OUTAGE_STACK) as stack:
            yield stack, postgres


async def test_an_answer_finished_during_a_database_outage_is_stored_when_it_returns(
    outage: tuple[Stack, StoppablePostgres],
) -> None:
    stack, postgres = outage
    # About 1 s of streaming, all of it while the database is down.
    stack.models.push(Turn.say("The answer survives the outage.", chunk_size=3, chunk_delay_s=0.1))
    async with stack.client() as client:
        session = await new_session(client)
        turn = asyncio.create_task(chat(client, session, "hello"))
        await eventually(lambda: len(stack.models.requests) == 1, what="the model call (the prompt is stored by then)")
        postgres.stop()  # (not from a thread: forking there beside gRPC crashed the process)
        stopped_at = time.monotonic()
        await asyncio.sleep(OUTAGE_S)
        assert not turn.done(), "the turn ended while the database was down"
        postgres.start()
        async with asyncio.timeout(30):
            chunks = await turn
        recovered_in = time.monotonic() - stopped_at - OUTAGE_S
    assert chunks[-2]["type"] == "finish", chunks[-3:]
    assert text_of(chunks) == "The answer survives the outage."
    user, assistant = await recorded_turn(stack, session)
    assert user["parts"] == [{"type": "text", "text": "hello"}]
    assert "failure" not in assistant["metadata"] and "interrupted" not in assistant["metadata"]
    assert [p["text"] for p in assistant["parts"] if p["type"] == "text"] == ["The answer survives the outage."]
    # The commit's backoff is capped at 2 s: it is stored soon after the database is back.
    assert recovered_in < 5


def test_a_database_failure_of_a_turn_reads_as_what_to_do_not_as_the_driver_error() -> None:
    from popagent_agent_runner.failures import TurnFailure
    from popagent_agent_runner.llm.wire import classify_model_error
    from popagent_agent_runner.turn.failure_texts import failure_message
    from popagent_core.errors import StorageError

    failure = classify_model_error(StorageError("database error: FileNotFoundError"))
    assert failure.error_class is TurnFailure.STORAGE
    message = failure_message(failure, failure.message)
    assert "FileNotFoundError" not in message and message.endswith("send it again in a moment.")


async def test_the_model_list_is_served_while_the_database_is_down(outage: tuple[Stack, StoppablePostgres]) -> None:
    """/api/models needs only the model gateway's catalog (issue 22, finding 5)."""
    stack, postgres = outage
    async with stack.client() as client:
        before = (await client.get("/api/models")).json()
        postgres.stop()
        try:
            response = await client.get("/api/models")
        finally:
            postgres.start()
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["models"] == before["models"] and body["models"]
    assert "configured models are unknown" in body["warning"]
