"""Memory threads: what a turn reads before it starts and what it stores when it completes.

A chat session's thread has the session's id (resource `popagent-user`). Each stored row
is one UI message, keyed by its id so a retried request never stores it twice, with the
model-side messages (pydantic-ai's serialized `ModelMessage`s) it stands for:

    {"ui": <AI SDK UI message>, "model": [<ModelMessage JSON>, ...]}

The next turn's history is the concatenation of the `model` lists in order, so the
model sees exactly what it saw before (tool calls, tool results, delegation results),
and the `ui` part keeps what the user saw (text, tool parts, `data-agentActivity`).
A delegated specialist's run is stored on its own isolated thread, a child of the chat
thread (so deleting the chat thread removes it).

A turn records itself as it goes (issue 22): before the model is called, the user message
and a placeholder answer marked `interrupted` (`begin_turn`); when it ends, the answer as it
ended (`commit_turn`): complete, or marked failed/interrupted with what was streamed. Both
writes go to the thread and to the session's UI messages (what reopening the session
shows), each in one transaction; the complete one carries the turn's outbox event. A
runner that dies mid-turn leaves the prompt and the `interrupted` placeholder.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson
from asyncpg.pool import PoolConnectionProxy
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, ToolCallPart, ToolReturnPart

from popagent.events.v1 import events_pb2
from popagent_agent_runner.memory.observational.observer import RawMessage
from popagent_agent_runner.memory.observational.store import LogEntry, MemorySettings, ThreadRead, ThreadState
from popagent_agent_runner.memory.observational.tokens import count_messages
from popagent_agent_runner.state.profiles import AgentProfile, RuntimeSnapshot
from popagent_core import subjects
from popagent_core.bus import enqueue_event
from popagent_core.db import wrap_db_errors
from popagent_core.errors import ConfigurationError, FailedPrecondition, NotFound
from popagent_core.redaction import REDACTED, RETIRED_SECRET_TOOLS, redact_tool_payload, redact_ui_message
from popagent_core.telemetry import statements_span

SPECIALIST_RESOURCE = "popagent-specialist"


@dataclass(frozen=True, slots=True)
class MessageVersions:
    """A user message's versions (each edit is one): how many, and the number of the one shown."""

    message_id: str
    versions: int
    shown: int


# Threads whose parsed history this process keeps (the sessions it served last), bounded in count
# and in the size of their stored JSON (a rough measure of the parsed copies; issue 23, finding 2).
HISTORY_CACHE_SIZE = 256
HISTORY_CACHE_BYTES = 64 * 1024 * 1024
# Answers with more text than this are stored HEAVY_COMMITS at a time (commit_turn).
HEAVY_COMMIT_CHARS = 256 * 1024
HEAVY_COMMITS = 1
# A history larger than this share of the byte bound is not cached at all.
HISTORY_CACHE_ENTRY_BYTES = HISTORY_CACHE_BYTES // 8

Version = tuple[int, int]
# A chat turn's id and the runner that must still hold its record for its answer to be stored.
TurnFence = tuple[str, str]
"""A thread's (message count, last seq): any insert or delete changes it."""

# The resource every chat thread belongs to (the spec's single user).
USER_RESOURCE = "popagent-user"


@dataclass
class SpecialistRun:
    """A finished delegation, kept until the turn persists it on its own isolated thread."""

    thread_id: str
    agent_id: str
    messages: list[ModelMessage]


@dataclass(frozen=True)
class TurnState:
    workspace_id: str
    # The workspace's registered path (relative to the workspace root); None: not registered.
    workspace_path: str | None
    snapshot: RuntimeSnapshot
    profiles: dict[str, AgentProfile]
    history: list[ModelMessage]
    # Long-term memories relevant to the prompt as the request carried it, best first (not yet bounded).
    relevant_memories: list[str]
    # The thread's version when it was read; whether the newest message is already in it.
    version: Version = (0, 0)
    retried: bool = False
    # The stored size of `history` (its JSON), which the history cache is bounded by.
    history_bytes: int = 0
    # Observational memory's read of the thread, from the same query; None: not read (no settings row).
    memory: ThreadRead | None = None


def _stored(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """Messages as stored: retired secret-tool payloads redacted (the kernel's one redaction), and
    requests without their instructions, which every run derives afresh from the persisted profile
    (so an edit applies on the next run and a thread does not repeat them turn after turn)."""
    stored: list[ModelMessage] = []
    for message in messages:
        if isinstance(message, ModelRequest) and message.instructions is not None:
            message = dataclasses.replace(message, instructions=None)
        stored.append(message)
        for part in message.parts:
            if isinstance(part, ToolCallPart) and part.tool_name in RETIRED_SECRET_TOOLS:
                part.args = orjson.dumps({"redacted": REDACTED}).decode()
            elif isinstance(part, ToolReturnPart) and part.tool_name in RETIRED_SECRET_TOOLS:
                part.content = redact_tool_payload(part.tool_name, part.content, "output")
    return stored


def _content(ui: dict[str, Any] | None, stored: Sequence[ModelMessage]) -> str:
    body: dict[str, Any] = {"model": ModelMessagesTypeAdapter.dump_python(list(stored), mode="json")}
    if ui is not None:
        body["ui"] = redact_ui_message(ui)
    return orjson.dumps(body).decode()


def _timestamp(value: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(value) if value is not None else None


def _memory_read(row: asyncpg.Record, history: list[ModelMessage]) -> ThreadRead | None:
    """Observational memory's read of the thread from the prelude's row: its raw messages are the
    history's tail (`models` model messages per row), so nothing is parsed twice."""
    if row["memory_settings"] is None:
        return None
    settings = MemorySettings.from_row(orjson.loads(row["memory_settings"]))
    state = ThreadState()
    if row["observation_state"] is not None:
        fields = orjson.loads(row["observation_state"])
        state = ThreadState(
            generation=fields["generation"],
            observed_seq=fields["observed_seq"],
            buffered_seq=fields["buffered_seq"],
            calibration=float(fields["calibration"]),
            last_model=fields["last_model"],
            last_turn_at=_timestamp(fields["last_turn_at"]),
            last_compaction_at=_timestamp(fields["last_compaction_at"]),
        )
    log = [
        LogEntry(**{**entry, "created_at": _timestamp(entry["created_at"])})
        for entry in orjson.loads(row["observation_log"])
    ]
    rows = orjson.loads(row["raw_rows"])
    start = len(history) - sum(raw["models"] for raw in rows)
    if start < 0:
        return None  # not the history's tail (a concurrent write between the parts): read again
    raw: list[RawMessage] = []
    uncounted: list[tuple[int, int]] = []
    for entry in rows:
        messages = history[start : start + entry["models"]]
        start += entry["models"]
        tokens = entry["tokens"]
        if tokens is None:
            tokens = count_messages(messages)
            uncounted.append((entry["seq"], tokens))
        created_at = _timestamp(entry["created_at"])
        assert created_at is not None
        raw.append(RawMessage(entry["seq"], entry["id"], entry["role"], created_at, messages, tokens))
    return ThreadRead(settings, state, raw, log, uncounted)


class ThreadStore:
    def __init__(self, pool: asyncpg.Pool, queries: Mapping[str, str]) -> None:
        self.pool = pool
        self.q = queries
        # Parsed history by thread, with the version it is of. A session's next turn usually
        # runs here, and history is the largest thing a turn reads: with a current copy the
        # prelude skips building, sending and parsing it. Any other writer changes the version.
        self._history: collections.OrderedDict[str, tuple[Version, list[ModelMessage], int]] = collections.OrderedDict()
        self._history_bytes = 0
        self._heavy_commits = asyncio.Semaphore(HEAVY_COMMITS)

    async def prelude(self, session_id: str, message_id: str, prompt: str, memories_limit: int) -> TurnState:
        """The session's turn state; NotFound when there is no such (live) session."""
        cached = self._history.get(session_id)
        known: Version = cached[0] if cached is not None else (-1, -1)
        with wrap_db_errors():
            row = await self.pool.fetchrow(
                self.q["turn_prelude"], session_id, message_id, prompt, memories_limit, *known
            )
        if row is None:
            self._drop(session_id)
            raise NotFound(f"session {session_id!r} not found")
        if row["runtime"] is None:
            raise ConfigurationError("agent-runtime settings row is missing")
        version: Version = (row["messages"], row["last_seq"])
        if row["history"] is None:
            # The copy read before the query is current; another turn on this session may have
            # dropped it from the cache meanwhile (begin_turn, commit_turn), so it is not looked up again.
            assert cached is not None
            if session_id in self._history:
                self._history.move_to_end(session_id)
            history = list(cached[1])
            history_bytes = cached[2]
        else:
            history = ModelMessagesTypeAdapter.validate_json(row["history"])
            history_bytes = len(row["history"])
            if not row["retried"]:
                self._keep(session_id, version, history, history_bytes)
        agents = orjson.loads(row["agents"] or "[]")
        return TurnState(
            memory=_memory_read(row, history),
            workspace_id=row["workspace_id"],
            workspace_path=row["workspace_path"],
            snapshot=RuntimeSnapshot.from_row(orjson.loads(row["runtime"])),
            profiles={raw["id"]: AgentProfile.from_row(raw) for raw in agents},
            history=history,
            relevant_memories=orjson.loads(row["recalled"]),
            version=version,
            retried=row["retried"],
            history_bytes=history_bytes,
        )

    async def version(self, session_id: str) -> Version:
        """The thread's version now (message count, last seq)."""
        with wrap_db_errors():
            row = await self.pool.fetchrow(self.q["thread_version_and_seq"], session_id, "")
        return (row["messages"], row["last_seq"])

    async def drop_turn(self, session_id: str, prompt_id: str) -> None:
        """A rolled-back turn leaves nothing: its prompt and what answered it go from the session's UI
        messages and from the thread (nothing happens when the prompt was never stored)."""
        self._drop(session_id)
        with wrap_db_errors(), statements_span("drop_turn"):
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(self.q["drop_turn_from_session"], session_id, prompt_id)
                await conn.execute(self.q["drop_turn_from_thread"], session_id, prompt_id)

    async def double_texting(self, session_id: str) -> str:
        """The session's double-texting policy (state.sessions.DOUBLE_TEXTING_POLICIES); NotFound when
        there is no such session."""
        with wrap_db_errors():
            policy = await self.pool.fetchval(self.q["session_double_texting"], session_id)
        if policy is None:
            raise NotFound(f"session {session_id!r} not found")
        return policy

    def _keep(self, thread_id: str, version: Version, history: list[ModelMessage], size: int) -> None:
        self._drop(thread_id)
        if size > HISTORY_CACHE_ENTRY_BYTES:
            return
        self._history[thread_id] = (version, list(history), size)
        self._history_bytes += size
        while len(self._history) > HISTORY_CACHE_SIZE or self._history_bytes > HISTORY_CACHE_BYTES:
            _, (_, _, evicted) = self._history.popitem(last=False)
            self._history_bytes -= evicted

    def _drop(self, thread_id: str) -> None:
        entry = self._history.pop(thread_id, None)
        if entry is not None:
            self._history_bytes -= entry[2]

    @property
    def cached_history_bytes(self) -> int:
        return self._history_bytes

    async def _record_in_session(
        self, conn: asyncpg.Connection | PoolConnectionProxy, session_id: str, *messages: dict[str, Any]
    ) -> None:
        """Put the turn's UI messages in the session's list, by id: a known assistant message
        is replaced in place, a known user message (a regenerated prompt) drops what followed it."""
        row = await conn.fetchrow(self.q["session_messages_for_turn"], session_id)
        if row is None:
            raise NotFound(f"session {session_id!r} was deleted during the turn")
        listed: list[dict[str, Any]] = orjson.loads(row["messages"])
        for message in messages:
            message = redact_ui_message(message)
            index = next((i for i, known in enumerate(listed) if known.get("id") == message["id"]), None)
            if index is None:
                listed.append(message)
            elif message["role"] == "user":
                if listed[index].get("parts") != message.get("parts"):
                    # An edit, not a retry of the same prompt: the branch it leaves is kept as a version.
                    await self._keep_version(conn, session_id, message["id"], listed[index:])
                listed[index:] = [message]
            else:
                listed[index] = message
        await conn.execute(self.q["store_session_messages"], session_id, orjson.dumps(listed).decode(), len(listed))

    async def _keep_version(
        self,
        conn: asyncpg.Connection | PoolConnectionProxy,
        session_id: str,
        message_id: str,
        branch: list[dict[str, Any]],
    ) -> None:
        """Keep the branch an edit of `message_id` leaves (its UI messages and thread rows), and
        number the edit as the message's next version, the one shown."""
        rows = await self._branch_rows(conn, session_id, message_id)
        ui, thread = orjson.dumps(branch).decode(), orjson.dumps(rows).decode()
        if await conn.fetchval(self.q["keep_shown_version"], session_id, message_id, ui, thread) is None:
            await conn.execute(self.q["keep_first_version"], session_id, message_id, ui, thread)
        await conn.fetchval(self.q["add_shown_version"], session_id, message_id)

    async def _branch_rows(
        self, conn: asyncpg.Connection | PoolConnectionProxy, session_id: str, message_id: str
    ) -> list[dict[str, Any]]:
        rows = await conn.fetch(self.q["thread_rows_from"], session_id, message_id)
        return [
            {"id": r["id"], "role": r["role"], "content": orjson.loads(r["content"]), "tokens": r["tokens"]}
            for r in rows
        ]

    async def message_versions(self, session_id: str) -> list[MessageVersions]:
        """The session's messages that have versions: how many, and which one is shown."""
        with wrap_db_errors():
            rows = await self.pool.fetch(self.q["message_versions"], session_id)
        return [MessageVersions(r["message_id"], r["versions"], r["shown"]) for r in rows]

    async def show_version(self, session_id: str, message_id: str, version: int) -> None:
        """Show version `version` of user message `message_id`: the session's UI messages and the
        thread from that message on become that branch's, and the branch shown until now is kept.
        Refused while a turn runs or waits on the session (it would write into the branch left)."""
        self._drop(session_id)
        with wrap_db_errors(), statements_span("show_version"):
            async with self.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(self.q["session_messages_for_turn"], session_id)
                if row is None:
                    raise NotFound(f"session {session_id!r} not found")
                if await conn.fetchval(self.q["session_turn_in_progress"], session_id):
                    raise FailedPrecondition("a turn runs or waits on this chat: switch versions once it has ended")
                listed: list[dict[str, Any]] = orjson.loads(row["messages"])
                index = next((i for i, m in enumerate(listed) if m.get("id") == message_id), None)
                if index is None:
                    raise NotFound(f"message {message_id!r} is not in the chat as shown")
                wanted = await conn.fetchrow(self.q["message_version"], session_id, message_id, version)
                if wanted is None:
                    raise NotFound(f"message {message_id!r} has no version {version}")
                if wanted["ui_messages"] is None:
                    return  # already shown
                rows = await self._branch_rows(conn, session_id, message_id)
                await conn.fetchval(
                    self.q["keep_shown_version"],
                    session_id,
                    message_id,
                    orjson.dumps(listed[index:]).decode(),
                    orjson.dumps(rows).decode(),
                )
                await conn.execute(self.q["show_message_version"], session_id, message_id, version)
                branch: list[dict[str, Any]] = orjson.loads(wanted["ui_messages"])
                shown = [*listed[:index], *branch]
                await conn.execute(
                    self.q["store_session_messages"], session_id, orjson.dumps(shown).decode(), len(shown)
                )
                stored = await conn.fetchrow(self.q["thread_version_and_seq"], session_id, message_id)
                if stored["message_seq"] is not None:
                    await conn.execute(self.q["delete_thread_messages_from"], session_id, stored["message_seq"])
                thread: list[dict[str, Any]] = orjson.loads(wanted["thread_rows"])
                if thread:
                    await conn.execute(self.q["upsert_thread"], session_id, USER_RESOURCE, None)
                    await conn.execute(
                        self.q["insert_thread_messages"],
                        session_id,
                        [r["id"] for r in thread],
                        [r["role"] for r in thread],
                        [orjson.dumps(r["content"]).decode() for r in thread],
                        [r["tokens"] for r in thread],
                    )

    async def begin_turn(
        self,
        *,
        session_id: str,
        user_ui: dict[str, Any],
        user_request: ModelRequest,
        placeholder_ui: dict[str, Any],
        fresh: bool = False,
    ) -> Version:
        """Store the prompt before the model is called, with a placeholder answer; the thread's version after it.

        `fresh`: the prelude saw no earlier copy of the prompt, so one statement most likely does it
        (the answer waits for this write: eight round trips cost it milliseconds).
        """
        self._drop(session_id)
        user_content = _content(user_ui, _stored([user_request]))
        placeholder_content = _content(placeholder_ui, [])
        if fresh:
            with wrap_db_errors(), statements_span("begin_turn"):
                row = await self.pool.fetchrow(
                    self.q["begin_fresh_turn"],
                    session_id,
                    USER_RESOURCE,
                    orjson.dumps(redact_ui_message(user_ui)).decode(),
                    orjson.dumps(redact_ui_message(placeholder_ui)).decode(),
                    [user_ui["id"], placeholder_ui["id"]],
                    ["user", "assistant"],
                    [user_content, placeholder_content],
                )
            if row is not None:
                return (row["messages"], row["last_seq"])
        with wrap_db_errors(), statements_span("begin_turn"):
            async with self.pool.acquire() as conn, conn.transaction():
                await self._record_in_session(conn, session_id, user_ui, placeholder_ui)
                await conn.execute(self.q["upsert_thread"], session_id, USER_RESOURCE, None)
                before = await conn.fetchrow(self.q["thread_version_and_seq"], session_id, user_ui["id"])
                if before["message_seq"] is not None:
                    # A retried prompt replaces what answered it before.
                    await conn.execute(self.q["delete_thread_messages_after"], session_id, before["message_seq"])
                    await conn.execute(self.q["replace_thread_message"], session_id, user_ui["id"], user_content, None)
                    await conn.execute(
                        self.q["insert_thread_messages"],
                        session_id,
                        [placeholder_ui["id"]],
                        ["assistant"],
                        [placeholder_content],
                        [None],
                    )
                else:
                    await conn.execute(
                        self.q["insert_thread_messages"],
                        session_id,
                        [user_ui["id"], placeholder_ui["id"]],
                        ["user", "assistant"],
                        [user_content, placeholder_content],
                        [None, None],
                    )
                after = await conn.fetchrow(self.q["thread_version_and_seq"], session_id, user_ui["id"])
        return (after["messages"], after["last_seq"])

    async def commit_turn(
        self,
        *,
        session_id: str,
        base: TurnState,
        begun: Version | None,
        user_ui: dict[str, Any],
        assistant_ui: dict[str, Any],
        messages: Sequence[ModelMessage],
        specialist_runs: Sequence[SpecialistRun],
        outcomes: Sequence[events_pb2.TurnCompleted],
        fence: TurnFence | None = None,
    ) -> None:
        """Store the turn's user and assistant messages (and specialist threads), with its
        outcome events when it has them (a complete answer: the supervisor's and each delegation's),
        replacing `begin_turn`'s placeholder.
        With `fence` (turn id, runner id), only while that runner still holds the turn's record
        (FailedPrecondition otherwise: another runner took the turn over).

        `base` is the state the turn started from, `begun` the thread's version after
        `begin_turn`; `messages` are its new model messages, the first being the user's
        request. Raises NotFound when the session was deleted meanwhile.

        A heavy answer (over HEAVY_COMMIT_CHARS of text) is stored at most HEAVY_COMMITS at a time:
        serializing and sending it costs several copies of it, which ten concurrent 2 MB answers
        would otherwise all hold at once (issue 23, finding 2).
        """
        heavy = sum(len(part.get("text", "")) for part in assistant_ui.get("parts", ())) > HEAVY_COMMIT_CHARS
        async with self._heavy_commits if heavy else contextlib.nullcontext():
            await self._commit_turn(
                session_id=session_id,
                base=base,
                begun=begun,
                user_ui=user_ui,
                assistant_ui=assistant_ui,
                messages=messages,
                specialist_runs=specialist_runs,
                outcomes=outcomes,
                fence=fence,
            )

    async def _commit_turn(
        self,
        *,
        session_id: str,
        base: TurnState,
        begun: Version | None,
        user_ui: dict[str, Any],
        assistant_ui: dict[str, Any],
        messages: Sequence[ModelMessage],
        specialist_runs: Sequence[SpecialistRun],
        outcomes: Sequence[events_pb2.TurnCompleted],
        fence: TurnFence | None = None,
    ) -> None:
        self._drop(session_id)
        first, rest = (
            (messages[0], messages[1:]) if messages and isinstance(messages[0], ModelRequest) else (None, messages)
        )
        stored_user = _stored([first] if first is not None else [])
        stored_answer = _stored(rest)
        user_content = _content(user_ui, stored_user)
        assistant_content = _content(assistant_ui, stored_answer)
        # Counted once, here, so what follows the turn (observational memory's thresholds) sums the
        # stored counts in SQL instead of reading and parsing the messages back.
        user_tokens, assistant_tokens = count_messages(stored_user), count_messages(stored_answer)
        specialist_rows = [
            (run, _content(None, _stored(run.messages[:1])), _content(None, _stored(run.messages[1:])))
            for run in specialist_runs
        ]
        kept: Version | None = None
        with wrap_db_errors(), statements_span("commit_turn"):
            async with self.pool.acquire() as conn, conn.transaction():
                if fence is not None and not await conn.fetchval(self.q["turn_still_held"], *fence):
                    raise FailedPrecondition(f"turn {fence[0]} is no longer this agent-runner's: another took it over")
                await self._record_in_session(conn, session_id, user_ui, assistant_ui)
                await conn.execute(self.q["upsert_thread"], session_id, USER_RESOURCE, None)
                before = await conn.fetchrow(self.q["thread_version_and_seq"], session_id, user_ui["id"])
                # The turn's history plus its messages is the thread only if nobody wrote in between.
                expected = begun if begun is not None else base.version
                extends = not base.retried and (before["messages"], before["last_seq"]) == expected
                seq = before["message_seq"]
                deleted = 0
                if seq is not None:
                    status = await conn.execute(self.q["delete_thread_messages_after"], session_id, seq)
                    deleted = int(status.split()[-1])
                    await conn.execute(
                        self.q["replace_thread_message"], session_id, user_ui["id"], user_content, user_tokens
                    )
                stored = await conn.fetch(
                    self.q["insert_thread_messages"],
                    session_id,
                    [user_ui["id"], assistant_ui["id"]],
                    ["user", "assistant"],
                    [user_content, assistant_content],
                    [user_tokens, assistant_tokens],
                )
                if extends and len(stored) == (1 if seq is not None else 2):
                    # The rows follow the version the turn read: the thread is now that plus them.
                    kept = (before["messages"] - deleted + len(stored), max(row["seq"] for row in stored))
                for run, prompt, answer in specialist_rows:
                    resource = f"{SPECIALIST_RESOURCE}:{run.agent_id}"
                    await conn.execute(self.q["upsert_thread"], run.thread_id, resource, session_id)
                    await conn.execute(
                        self.q["insert_thread_messages"],
                        run.thread_id,
                        ["prompt", "answer"],
                        ["user", "assistant"],
                        [prompt, answer],
                        [None, None],
                    )
                for outcome in outcomes:
                    await enqueue_event(conn, subjects.TURN_COMPLETED, outcome.SerializeToString())
        if kept is not None:
            size = base.history_bytes + len(user_content) + len(assistant_content)
            self._keep(session_id, kept, [*base.history, *stored_user, *stored_answer], size)

    async def publish_outcomes(self, outcomes: Sequence[events_pb2.TurnCompleted]) -> None:
        """The outcomes of a turn that stored nothing (a failure, a refusal)."""
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                for outcome in outcomes:
                    await enqueue_event(conn, subjects.TURN_COMPLETED, outcome.SerializeToString())

    async def messages(self, thread_id: str) -> list[tuple[str, str, dict[str, Any]]]:
        """(id, role, content) of a thread's stored rows, oldest first."""
        with wrap_db_errors():
            rows = await self.pool.fetch(self.q["thread_messages"], thread_id)
        return [(row["id"], row["role"], orjson.loads(row["content"])) for row in rows]
