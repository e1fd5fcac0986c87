"""Channel connections, the conversation mapping, taken-in event ids and traffic history
(popagent_channel_*); PostgreSQL is canonical, credentials are the secrets service's (`credentials.py`)."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal, Protocol, TypeVar

import asyncpg

from popagent_agent_runner.channels.credentials import Credentials, checked_credentials
from popagent_core.db import load_queries, record_of, wrap_db_errors
from popagent_core.errors import AlreadyExists, InvalidArgument, NotFound

QUERIES = load_queries(Path(__file__).parent / "queries.sql")

PLATFORMS = ("slack", "telegram", "discord", "matrix")
MAX_NAME_CHARS = 64
MAX_USERS = 500
MAX_USER_ID_CHARS = 64
MAX_URL_CHARS = 2000
MAX_HISTORY_TEXT_CHARS = 2000
_URL = re.compile(r"^https?://[^\s/?#]+(/[^\s]*)?$")
# Event ids are kept this long: every platform gives up retrying a delivery well within a day.
EVENT_MEMORY_S = 86400.0

Direction = Literal["in", "out", "error"]


@dataclass(frozen=True, slots=True)
class ConnectionRecord:
    id: str
    name: str
    platform: str
    workspace_id: str
    allowed_users: tuple[str, ...]
    approvers: tuple[str, ...]
    bot_user_id: str
    api_base_url: str
    credentials_set: bool
    enabled: bool
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    id: int
    direction: str
    conversation: str
    thread: str
    platform_user: str
    session_id: str
    turn_id: str
    text: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ApprovalCard:
    """An approval's card in a thread: the message with its buttons, and its outcome once settled."""

    approval_id: str
    connection_id: str
    conversation: str
    thread: str
    session_id: str
    message_id: str
    tool_name: str
    outcome: str


@dataclass(frozen=True, slots=True)
class RelayRecord:
    """A channel turn's reply as it is relayed: the turn, where it goes, and the message it streams into."""

    turn_id: str
    connection_id: str
    conversation: str
    thread: str
    reply_thread: str
    session_id: str
    message_id: str


@dataclass(frozen=True)
class ConnectionChanges:
    """What a create sets or an update changes; None leaves a field as it is (or its default)."""

    name: str | None = None
    platform: str | None = None
    workspace_id: str | None = None
    allowed_users: Sequence[str] | None = None
    approvers: Sequence[str] | None = None
    bot_user_id: str | None = None
    api_base_url: str | None = None
    # All of the platform's credentials at once (credentials.REQUIRED); None keeps the stored ones.
    credentials: dict[str, str] | None = None
    enabled: bool | None = None


class CredentialKeeper(Protocol):
    async def put(self, connection_id: str, values: dict[str, str]) -> None: ...

    async def delete(self, connection_id: str) -> None: ...

    async def resolve(self, platform: str, connection_id: str) -> Credentials: ...


def _connection(row: asyncpg.Record) -> ConnectionRecord:
    return record_of(
        ConnectionRecord, row, allowed_users=tuple(row["allowed_users"]), approvers=tuple(row["approvers"])
    )


def _user_ids(field: str, values: Sequence[str]) -> tuple[str, ...]:
    if len(values) > MAX_USERS:
        raise InvalidArgument(f"{field} must name at most {MAX_USERS} users")
    for value in values:
        if not value or len(value) > MAX_USER_ID_CHARS or not value.isprintable() or " " in value:
            raise InvalidArgument(f"{field} must be platform user ids of 1 to {MAX_USER_ID_CHARS} characters")
    return tuple(dict.fromkeys(values))


T = TypeVar("T")


def pick(new: T | None, old: T | None, default: T) -> T:
    return new if new is not None else (old if old is not None else default)


def _checked(current: ConnectionRecord | None, changes: ConnectionChanges) -> ConnectionRecord:
    name = pick(changes.name, current.name if current else None, "")
    if not name or len(name) > MAX_NAME_CHARS or not name.isprintable():
        raise InvalidArgument(f"name must be 1 to {MAX_NAME_CHARS} printable characters")
    platform = pick(changes.platform, current.platform if current else None, "")
    if platform not in PLATFORMS:
        raise InvalidArgument(f"platform must be one of {', '.join(PLATFORMS)}")
    if current is not None and platform != current.platform:
        raise InvalidArgument("platform cannot change; add another connection")
    workspace_id = pick(changes.workspace_id, current.workspace_id if current else None, "")
    if len(workspace_id) > 128 or "\x00" in workspace_id:
        raise InvalidArgument("workspaceId must be a workspace id of at most 128 characters")
    bot_user_id = pick(changes.bot_user_id, current.bot_user_id if current else None, "")
    if len(bot_user_id) > MAX_USER_ID_CHARS or "\x00" in bot_user_id:
        raise InvalidArgument(f"botUserId must be at most {MAX_USER_ID_CHARS} characters")
    api_base_url = pick(changes.api_base_url, current.api_base_url if current else None, "")
    if api_base_url and (len(api_base_url) > MAX_URL_CHARS or not _URL.fullmatch(api_base_url)):
        raise InvalidArgument(f"apiBaseUrl must be an http(s) URL of at most {MAX_URL_CHARS} characters, or empty")
    if platform == "matrix" and not api_base_url:
        raise InvalidArgument("apiBaseUrl is required for Matrix: the homeserver's client-server API URL")
    if platform == "matrix" and not bot_user_id:
        raise InvalidArgument("botUserId is required for Matrix: the bot's user id (@name:server)")
    if changes.credentials is not None:
        checked_credentials(platform, changes.credentials)
    elif current is None:
        raise InvalidArgument("credentials are required: the bot token and the platform's inbound key")
    now = datetime.now().astimezone()
    return ConnectionRecord(
        id=current.id if current else f"chn-{uuid.uuid4().hex}",
        name=name,
        platform=platform,
        workspace_id=workspace_id,
        allowed_users=_user_ids(
            "allowedUsers", pick(changes.allowed_users, current.allowed_users if current else None, ())
        ),
        approvers=_user_ids("approvers", pick(changes.approvers, current.approvers if current else None, ())),
        bot_user_id=bot_user_id,
        api_base_url=api_base_url,
        credentials_set=True,
        enabled=pick(changes.enabled, current.enabled if current else None, True),
        created_at=current.created_at if current else now,
        updated_at=now,
    )


class ChannelStore:
    def __init__(self, pool: asyncpg.Pool, credentials: CredentialKeeper) -> None:
        self.pool = pool
        self.credentials = credentials

    async def list(self) -> list[ConnectionRecord]:
        with wrap_db_errors():
            return [_connection(row) for row in await self.pool.fetch(QUERIES["list_connections"])]

    async def get(self, connection_id: str) -> ConnectionRecord:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["get_connection"], connection_id)
        if row is None:
            raise NotFound(f"channel connection {connection_id!r} not found")
        return _connection(row)

    async def create(self, changes: ConnectionChanges) -> ConnectionRecord:
        connection = _checked(None, changes)
        assert changes.credentials is not None  # _checked requires them on a create
        async with self.pool.acquire() as conn, conn.transaction():
            await _write_row(conn, QUERIES["insert_connection"], connection)
            # Stored before the row commits: a failed store leaves no connection claiming credentials.
            await self.credentials.put(connection.id, checked_credentials(connection.platform, changes.credentials))
        return await self.get(connection.id)

    async def update(self, connection_id: str, changes: ConnectionChanges) -> ConnectionRecord:
        current = await self.get(connection_id)
        connection = _checked(current, changes)
        async with self.pool.acquire() as conn, conn.transaction():
            with wrap_db_errors():
                if await conn.fetchrow(QUERIES["lock_connection"], connection_id) is None:
                    raise NotFound(f"channel connection {connection_id!r} not found")
            await _write_row(conn, QUERIES["update_connection"], connection)
            if changes.credentials is not None:
                await self.credentials.put(connection.id, checked_credentials(connection.platform, changes.credentials))
        return await self.get(connection.id)

    async def delete(self, connection_id: str) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            with wrap_db_errors():
                credentials_set = await conn.fetchval(QUERIES["delete_connection"], connection_id)
            if credentials_set is None:
                raise NotFound(f"channel connection {connection_id!r} not found")
            await self.credentials.delete(connection_id)

    async def first_delivery(self, connection_id: str, event_id: str) -> bool:
        """True the first time this event id of the connection is taken in, False for a retry or replay."""
        with wrap_db_errors():
            return await self.pool.fetchval(QUERIES["seen_event"], connection_id, event_id) is not None

    async def forget_old_events(self) -> None:
        with wrap_db_errors():
            await self.pool.execute(QUERIES["forget_old_events"], EVENT_MEMORY_S)

    @contextlib.asynccontextmanager
    async def thread_locked(self, connection_id: str, conversation: str, thread: str) -> AsyncIterator[None]:
        """Held while one arrival in this thread is mapped and its turn started, across every agent-runner."""
        async with self.pool.acquire() as conn:
            with wrap_db_errors():
                await conn.execute(QUERIES["thread_lock"], connection_id, conversation, thread)
            try:
                yield
            finally:
                with wrap_db_errors():
                    await conn.execute(QUERIES["thread_unlock"], connection_id, conversation, thread)

    async def session_for(self, connection_id: str, conversation: str, thread: str) -> tuple[str, bool]:
        """The thread's session id, and whether it is new (the caller creates the session then)."""
        with wrap_db_errors():
            found = await self.pool.fetchval(QUERIES["find_conversation"], connection_id, conversation, thread)
            if found is not None:
                return found, False
            session_id = f"channel-{uuid.uuid4().hex}"
            inserted = await self.pool.fetchval(
                QUERIES["insert_conversation"], connection_id, conversation, thread, session_id
            )
            if inserted is not None:
                return inserted, True
            # Another arrival mapped it meanwhile.
            return await self.pool.fetchval(QUERIES["find_conversation"], connection_id, conversation, thread), False

    async def record(
        self,
        connection_id: str,
        direction: Direction,
        text: str,
        *,
        conversation: str = "",
        thread: str = "",
        platform_user: str = "",
        session_id: str = "",
        turn_id: str = "",
    ) -> None:
        with wrap_db_errors():
            await self.pool.execute(
                QUERIES["add_history"],
                connection_id,
                direction,
                conversation,
                thread,
                platform_user,
                session_id,
                turn_id,
                text[:MAX_HISTORY_TEXT_CHARS],
            )

    async def history(self, connection_id: str, limit: int) -> list[HistoryEntry]:
        await self.get(connection_id)
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["list_history"], connection_id, limit)
        return [record_of(HistoryEntry, row) for row in rows]

    async def claim_card(
        self, approval_id: str, connection_id: str, conversation: str, thread: str, session_id: str, tool_name: str
    ) -> bool:
        """True for the one caller that posts the approval's card (a turn taken over asks again)."""
        with wrap_db_errors():
            return (
                await self.pool.fetchval(
                    QUERIES["add_card"], approval_id, connection_id, conversation, thread, session_id, "", tool_name
                )
                is not None
            )

    async def card_posted(self, approval_id: str, message_id: str) -> None:
        with wrap_db_errors():
            await self.pool.execute(QUERIES["set_card_message"], approval_id, message_id)

    async def card(self, connection_id: str, approval_id: str) -> ApprovalCard | None:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["get_card"], approval_id, connection_id)
        return record_of(ApprovalCard, row) if row is not None else None

    async def card_by_message(self, connection_id: str, message_id: str) -> ApprovalCard | None:
        """The card posted as this message (a Matrix reaction names only the event it annotates)."""
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["card_by_message"], connection_id, message_id)
        return record_of(ApprovalCard, row) if row is not None else None

    async def claim_sync(self, connection_id: str, runner_id: str, lease_s: float) -> str | None:
        """The `since` token to resume the connection's sync loop from, when this runner holds it
        (taken now or renewed); None while another runner's lease runs."""
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["claim_sync"], connection_id, runner_id, lease_s)
        return row["since"] if row is not None else None

    async def synced(self, connection_id: str, runner_id: str, since: str, lease_s: float) -> bool:
        """The next sync resumes from `since`; False when this runner no longer holds the loop."""
        with wrap_db_errors():
            return await self.pool.fetchval(QUERIES["synced"], connection_id, runner_id, since, lease_s) is not None

    async def release_sync(self, connection_id: str, runner_id: str) -> None:
        with wrap_db_errors():
            await self.pool.execute(QUERIES["release_sync"], connection_id, runner_id)

    async def settle_card(self, approval_id: str, outcome: str) -> ApprovalCard | None:
        """The card with its outcome written, for the first caller only (None: settled already)."""
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["settle_card"], approval_id, outcome)
        return record_of(ApprovalCard, row) if row is not None else None

    async def open_cards(self, session_id: str) -> list[ApprovalCard]:
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["open_cards_of_session"], session_id)
        return [record_of(ApprovalCard, row) for row in rows]

    async def add_relay(self, relay: RelayRecord, runner_id: str, lease_s: float) -> None:
        with wrap_db_errors():
            await self.pool.execute(
                QUERIES["add_relay"],
                relay.turn_id,
                relay.connection_id,
                relay.conversation,
                relay.thread,
                relay.reply_thread,
                relay.session_id,
                runner_id,
                lease_s,
            )

    async def relay_posted(self, turn_id: str, message_id: str) -> None:
        with wrap_db_errors():
            await self.pool.execute(QUERIES["relay_posted"], turn_id, message_id)

    async def renew_relays(self, runner_id: str, lease_s: float, turn_ids: Sequence[str]) -> None:
        with wrap_db_errors():
            await self.pool.execute(QUERIES["renew_relays"], runner_id, lease_s, list(turn_ids))

    async def take_over_relays(self, runner_id: str, lease_s: float, limit: int) -> list[RelayRecord]:
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["take_over_relays"], runner_id, lease_s, limit)
        return [record_of(RelayRecord, row) for row in rows]

    async def finish_relay(self, turn_id: str, runner_id: str) -> bool:
        """True when this runner still held the relay (False: another took it over meanwhile)."""
        with wrap_db_errors():
            return await self.pool.fetchval(QUERIES["finish_relay"], turn_id, runner_id) is not None

    async def forget_old_relays(self) -> None:
        with wrap_db_errors():
            await self.pool.execute(QUERIES["forget_old_relays"], EVENT_MEMORY_S)

    async def starter_of_turn(self, connection_id: str, turn_id: str) -> str:
        """The platform user whose message started the turn; "" when none is recorded."""
        with wrap_db_errors():
            return str(await self.pool.fetchval(QUERIES["starter_of_turn"], connection_id, turn_id) or "")

    async def session_of_turn(self, connection_id: str, turn_id: str) -> str:
        with wrap_db_errors():
            session_id = await self.pool.fetchval(QUERIES["session_of_turn"], connection_id, turn_id)
        if session_id is None:
            raise NotFound(f"connection {connection_id!r} has no turn {turn_id!r}")
        return session_id


async def _write_row(conn: asyncpg.pool.PoolConnectionProxy, query: str, c: ConnectionRecord) -> None:
    try:
        await conn.execute(
            query,
            c.id,
            c.name,
            c.platform,
            c.workspace_id,
            list(c.allowed_users),
            list(c.approvers),
            c.bot_user_id,
            c.api_base_url,
            c.credentials_set,
            c.enabled,
        )
    except asyncpg.UniqueViolationError:
        raise AlreadyExists(f"a channel connection named {c.name!r} exists already") from None
