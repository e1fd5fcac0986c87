"""Chat sessions: list, create, load, optimistic save, rename/archive, permanent deletion.

Permanent deletion runs in a fixed order and every step is idempotent:
1. mark the row `deleting_at` (from now on every read and list hides it),
2. SessionEnd hook (observational, fails open),
3. close the session's browser session (best effort),
4. one transaction: remove the session row, the thread (messages, memory state and
   every per-thread artifact cascade), and enqueue the session-deleted fact in the
   outbox, which the hooks service consumes to remove the session's audit rows.
A failure before step 4 commits leaves a hidden row that DeleteSession finishes when
called again (or the start-up sweep does); nothing is ever half visible.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from popagent.browser_bridge.v1 import browser_bridge_pb2, browser_bridge_pb2_grpc
from popagent.events.v1 import events_pb2
from popagent_agent_runner.state.workspaces import DEFAULT_WORKSPACE_ID, AgentWorkspaceStore
from popagent_core import subjects
from popagent_core.bus import enqueue_event
from popagent_core.db import record_of, wrap_db_errors
from popagent_core.errors import AlreadyExists, InvalidArgument, NotFound, PopagentError
from popagent_core.grpc_client import map_rpc_errors
from popagent_hooks_client.client import HooksClient
from popagent_hooks_client.events import Event

logger = logging.getLogger(__name__)

LIST_LIMIT = 200
MAX_TITLE_CHARS = 500
MAX_ID_CHARS = 128
DELETE_CONCURRENCY = 4
BROWSER_CLOSE_TIMEOUT_S = 5.0


def _check_id(session_id: str) -> str:
    if not 1 <= len(session_id) <= MAX_ID_CHARS or not session_id.isprintable():
        raise InvalidArgument(f"session id must be 1 to {MAX_ID_CHARS} printable characters")
    return session_id


def _check_title(title: str) -> str:
    if len(title) > MAX_TITLE_CHARS or "\x00" in title:
        raise InvalidArgument(f"title must be at most {MAX_TITLE_CHARS} characters")
    return title


DOUBLE_TEXTING_POLICIES = ("reject", "enqueue", "interrupt", "rollback")


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A chat session (never a task's own thread: those are not listed)."""

    id: str
    title: str
    title_locked: bool
    workspace_id: str
    revision: int
    archived_at: datetime | None
    created_at: datetime
    updated_at: datetime
    message_count: int
    # What a turn does while another runs on the session: "reject" (409) or "enqueue".
    double_texting: str = "reject"
    # The AI SDK UI messages as a JSON array; only reads of one session carry them.
    messages_json: str | None = None


def _session(row: asyncpg.Record) -> SessionRecord:
    return record_of(SessionRecord, row, messages_json=row.get("messages"))


@dataclass(frozen=True, slots=True)
class MessageMatch:
    """A chat message a search found, with an excerpt whose matches are between << and >>."""

    session_id: str
    title: str
    archived_at: datetime | None
    updated_at: datetime
    message_id: str
    role: str
    created_at: datetime
    excerpt: str


@dataclass(frozen=True, slots=True)
class SaveResult:
    saved: SessionRecord | None
    # The current server copy (with messages) when the revision was stale.
    current: SessionRecord | None


class SessionStore:
    def __init__(self, pool: asyncpg.Pool, workspaces: AgentWorkspaceStore, queries: dict[str, str]) -> None:
        self.pool = pool
        self.workspaces = workspaces
        self.q = queries

    async def list(self, *, archived: bool, workspace_id: str) -> list[SessionRecord]:
        """Chat sessions only: a task's own thread is never listed."""
        with wrap_db_errors():
            rows = await self.pool.fetch(self.q["list_sessions"], archived, workspace_id, LIST_LIMIT)
        return [_session(row) for row in rows]

    async def search_messages(self, query: str, limit: int) -> list[MessageMatch]:
        """Chat messages matching `query` (web-search syntax), best first."""
        with wrap_db_errors():
            rows = await self.pool.fetch(self.q["search_messages"], query, limit)
        return [record_of(MessageMatch, row) for row in rows]

    async def create(self, session_id: str, title: str, workspace_id: str, *, task_id: str = "") -> SessionRecord:
        """A chat session, or with `task_id` the thread of that background task."""
        session_id = _check_id(session_id or str(uuid.uuid4()))
        workspace_id = workspace_id or DEFAULT_WORKSPACE_ID
        if not await self.workspaces.exists(workspace_id):
            raise NotFound(f"workspaceId: workspace {workspace_id!r} is not registered")
        with wrap_db_errors():
            row = await self.pool.fetchrow(
                self.q["create_session"], session_id, _check_title(title), workspace_id, task_id or None
            )
        if row is None:
            raise AlreadyExists(f"session {session_id!r} already exists")
        return _session(row)

    async def get(self, session_id: str) -> SessionRecord:
        with wrap_db_errors():
            row = await self.pool.fetchrow(self.q["get_session"], session_id)
        if row is None:
            raise NotFound(f"session {session_id!r} not found")
        return _session(row)

    async def save(
        self, session_id: str, revision: int, title: str | None, messages_json: str, message_count: int
    ) -> SaveResult:
        if revision < 0 or message_count < 0:
            raise InvalidArgument("revision and message count must not be negative")
        if title is not None:
            _check_title(title)
        with wrap_db_errors():
            saved = await self.pool.fetchrow(
                self.q["save_session"], session_id, revision, messages_json, message_count, title
            )
        if saved is not None:
            return SaveResult(_session(saved), None)
        # Either the session does not exist (404) or the revision was stale (conflict).
        return SaveResult(None, await self.get(session_id))

    async def update(
        self, session_id: str, *, title: str | None, archived: bool | None, double_texting: str | None = None
    ) -> SessionRecord:
        if double_texting is not None and double_texting not in DOUBLE_TEXTING_POLICIES:
            raise InvalidArgument(f"doubleTexting must be one of {', '.join(DOUBLE_TEXTING_POLICIES)}")
        if title is not None:
            title = _check_title(title.strip())
            if not title:
                raise InvalidArgument("title must not be empty")
        with wrap_db_errors():
            row = await self.pool.fetchrow(self.q["update_session"], session_id, title, archived, double_texting)
        if row is None:
            raise NotFound(f"session {session_id!r} not found")
        return _session(row)


# Sessions a process remembers having started (SessionStart fires once per session and process).
SEEN_SESSIONS_CAP = 100_000


class SessionStarts:
    """`SessionStart` (docs/hooks.md, Events): when a session is created, and when this process first resumes one.

    The process remembers the sessions it created or resumed (the newest `SEEN_SESSIONS_CAP`), so
    a session's later turns fire nothing; the gateway sends a session's creation and its turns to
    one agent-runner worker, so a session normally starts once. Observational: a dispatch failure
    is logged and changes nothing.
    """

    def __init__(self, hooks: HooksClient, cap: int = SEEN_SESSIONS_CAP) -> None:
        self.hooks = hooks
        self.cap = cap
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()

    async def created(self, session_id: str, workspace_id: str) -> None:
        self._remember(session_id)
        await self._dispatch(session_id, {"workspaceId": workspace_id, "source": "create"})

    def first_resume(self, session_id: str) -> bool:
        """Whether this process has not seen the session yet (it has from now on)."""
        if session_id in self._seen:
            return False
        self._remember(session_id)
        return True

    def _remember(self, session_id: str) -> None:
        self._seen[session_id] = None
        if len(self._seen) > self.cap:
            self._seen.popitem(last=False)

    async def _dispatch(self, session_id: str, detail: dict[str, str]) -> None:
        try:
            await self.hooks.dispatch(Event.SESSION_START, session_id=session_id, detail=detail)
        except PopagentError as exc:
            logger.warning("SessionStart dispatch failed", extra={"session_id": session_id, "error": str(exc)})


@dataclass(kw_only=True, eq=False)
class SessionDeleter:
    pool: asyncpg.Pool
    workspaces: AgentWorkspaceStore
    hooks: HooksClient
    browser: browser_bridge_pb2_grpc.BrowserBridgeServiceStub
    q: dict[str, str]

    async def delete(self, session_id: str) -> bool:
        """Run the whole lifecycle; False when another caller finished it first."""
        with wrap_db_errors():
            marked = await self.pool.fetchrow(self.q["mark_session_deleting"], session_id)
        if marked is None:
            raise NotFound(f"session {session_id!r} not found")
        await self._session_end(session_id, marked["workspace_id"])
        await self._close_browser(session_id)
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                removed = await conn.execute(self.q["delete_session_row"], session_id)
                if removed == "DELETE 0":
                    return False
                await conn.execute(self.q["delete_thread"], session_id)
                await conn.execute(self.q["delete_session_turns"], session_id)
                await conn.execute(self.q["delete_session_approvals"], session_id)
                await conn.execute(self.q["delete_session_grants"], session_id)
                event = events_pb2.SessionDeleted(session_id=session_id, workspace_id=marked["workspace_id"])
                await enqueue_event(conn, subjects.SESSION_DELETED, event.SerializeToString())
        logger.info("session deleted", extra={"session_id": session_id, "workspace_id": marked["workspace_id"]})
        return True

    async def delete_workspace_sessions(self, workspace_id: str) -> int:
        """Every active, archived and half-deleted session of one workspace; returns how many were removed."""
        if not await self.workspaces.exists(workspace_id):
            raise NotFound(f"workspace {workspace_id!r} not found")
        with wrap_db_errors():
            ids = [row["id"] for row in await self.pool.fetch(self.q["workspace_session_ids"], workspace_id)]
        gate = asyncio.Semaphore(DELETE_CONCURRENCY)

        async def one(session_id: str) -> bool:
            async with gate:
                try:
                    return await self.delete(session_id)
                except NotFound:
                    return False  # deleted concurrently by someone else

        results = await asyncio.gather(*(one(session_id) for session_id in ids))
        return sum(results)

    async def resume_pending(self, older_than_s: float) -> int:
        """Finish deletions a crash or a failed step left behind (hidden rows)."""
        with wrap_db_errors():
            ids = [row["id"] for row in await self.pool.fetch(self.q["sessions_pending_deletion"], older_than_s)]
        finished = 0
        for session_id in ids:
            try:
                finished += await self.delete(session_id)
            except NotFound:
                continue
            except PopagentError as exc:
                logger.warning("pending session deletion failed", extra={"session_id": session_id, "error": str(exc)})
        return finished

    async def _session_end(self, session_id: str, workspace_id: str) -> None:
        # SessionEnd is observational: it always fails open, so no outcome stops deletion.
        try:
            await self.hooks.dispatch(
                Event.SESSION_END,
                session_id=session_id,
                detail={"reason": "deleted", "workspaceId": workspace_id},
            )
        except PopagentError as exc:
            logger.warning("SessionEnd dispatch failed", extra={"session_id": session_id, "error": str(exc)})

    async def _close_browser(self, session_id: str) -> None:
        try:
            with map_rpc_errors():
                await self.browser.CloseSession(
                    browser_bridge_pb2.CloseSessionRequest(session_id=session_id, session_deleted=True),
                    timeout=BROWSER_CLOSE_TIMEOUT_S,
                )
        except PopagentError as exc:
            logger.warning("browser session close failed", extra={"session_id": session_id, "code": exc.grpc_code.name})
