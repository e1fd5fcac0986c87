"""The turn's prelude reads what observational memory reads, in the same query: its settings, the
thread's cursor, the log and the raw messages after the cursor must be exactly what the memory's own
reads give (so a turn's request is the same whether it uses the prelude's read or reads again)."""

from __future__ import annotations

from typing import cast

import asyncpg
from memory.stack_helpers import LONG, OBSERVE_IN_TURN, memory_settings

from chat.helpers import chat, new_session
from popagent_agent_runner.memory import THREAD_QUERIES
from popagent_agent_runner.memory.observational import QUERIES as MEMORY_QUERIES
from popagent_agent_runner.memory.observational.store import ObservationStore, ThreadRead
from popagent_agent_runner.memory.threads import ThreadStore
from support.memory_agents import memory_agents
from support.stacks import Stack


async def _both(db: asyncpg.Connection, session: str, message_id: str) -> tuple[ThreadRead, ThreadRead]:
    """The prelude's read before `message_id` and the memory's own reads of the same thread."""
    pool = cast(asyncpg.Pool, db)  # one connection answers the same calls
    state = await ThreadStore(pool, THREAD_QUERIES).prelude(session, message_id, "", 1)
    assert state.memory is not None
    memory = ObservationStore(pool, MEMORY_QUERIES)
    settings = await memory.settings()
    if settings.enabled:
        view = await memory.read(session, message_id)
        own = ThreadRead(settings, view.state, view.raw, view.log)
    else:
        # Disabled: the memory reads the whole thread raw, and neither cursor nor log.
        own = ThreadRead(settings, state.memory.state, await memory.raw(session, 0, message_id), state.memory.log)
    return state.memory, own


def _same(prelude: ThreadRead, own: ThreadRead) -> None:
    assert prelude.settings == own.settings
    assert prelude.state == own.state
    assert prelude.log == own.log
    assert [(m.seq, m.id, m.role, m.created_at, m.tokens) for m in prelude.raw] == [
        (m.seq, m.id, m.role, m.created_at, m.tokens) for m in own.raw
    ]
    assert [m.messages for m in prelude.raw] == [m.messages for m in own.raw]


async def test_the_prelude_reads_what_the_memory_reads_before_and_after_observations(stack: Stack) -> None:
    stack.models.responder = memory_agents()
    async with (
        stack.client() as client,
        memory_settings(
            client,
            **OBSERVE_IN_TURN,
        ),
    ):
        session = await new_session(client)
        for n in range(3):
            await chat(client, session, f"{n}: short")
        async with stack.db() as db:
            prelude, own = await _both(db, session, "not-stored-yet")
            assert prelude.state.observed_seq == 0 and len(prelude.raw) == 6
            _same(prelude, own)
        for n in range(12):
            await chat(client, session, f"{n}: {LONG}")
        async with stack.db() as db:
            prelude, own = await _both(db, session, "not-stored-yet")
            # Observed by now: the raw messages start after the cursor, the log has entries.
            assert prelude.state.observed_seq > 0 and prelude.log
            _same(prelude, own)
            # A retried prompt: everything from that message on is left out of both.
            retried = await db.fetchval(
                "SELECT id FROM popagent_thread_messages WHERE thread_id = $1 AND role = 'user'"
                " ORDER BY seq DESC OFFSET 1 LIMIT 1",
                session,
            )
            assert isinstance(retried, str)
            prelude, own = await _both(db, session, retried)
            assert prelude.raw and prelude.raw[-1].id != retried
            _same(prelude, own)
        async with memory_settings(client, enabled=False), stack.db() as db:
            prelude, own = await _both(db, session, "not-stored-yet")
            # Disabled: the whole thread is raw.
            assert prelude.raw[0].seq == own.raw[0].seq and len(prelude.raw) == 30
            _same(prelude, own)
