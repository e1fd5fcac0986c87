"""The browser settings singleton, the held takeovers, tab owners, profiles and recordings."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import asyncpg

from popagent_core.db import load_queries, wrap_db_errors
from popagent_core.errors import AlreadyExists, ConfigurationError, Conflict, NotFound

QUERIES = load_queries(Path(__file__).parent / "queries.sql")


@dataclass(frozen=True, slots=True)
class BrowserSettings:
    enabled: bool
    # browser_run_code_unsafe for interactive agents.
    allow_code_execution: bool
    updated_at: datetime


def _settings(row: asyncpg.Record | None) -> BrowserSettings:
    if row is None:
        raise ConfigurationError("browser settings row is missing")
    if row["allow_code_execution"] is None:
        raise ConfigurationError("browser settings allow_code_execution is not seeded")
    return BrowserSettings(
        enabled=row["enabled"], allow_code_execution=row["allow_code_execution"], updated_at=row["updated_at"]
    )


class BrowserSettingsRepo:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def get(self) -> BrowserSettings:
        with wrap_db_errors():
            return _settings(await self.pool.fetchrow(QUERIES["get_browser_settings"]))

    async def update(self, enabled: bool | None, allow_code_execution: bool | None) -> BrowserSettings:
        with wrap_db_errors():
            return _settings(
                await self.pool.fetchrow(QUERIES["update_browser_settings"], enabled, allow_code_execution)
            )


class TakeoverRepo:
    """The chat sessions a user holds the browser of (popagent_browser_takeovers)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def held(self) -> list[str]:
        with wrap_db_errors():
            return [row["session_id"] for row in await self.pool.fetch(QUERIES["list_takeovers"])]

    async def set(self, session_id: str, held: bool) -> None:
        with wrap_db_errors():
            await self.pool.execute(QUERIES["hold_takeover" if held else "release_takeover"], session_id)


class TabOwnerRepo:
    """Each tab's owning chat session by the page's browser target id (popagent_browser_tab_owners)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def owners(self) -> dict[str, str]:
        with wrap_db_errors():
            return {row["target_id"]: row["session_id"] for row in await self.pool.fetch(QUERIES["list_tab_owners"])}

    async def save(self, owners: dict[str, str], gone: list[str]) -> None:
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                if gone:
                    await conn.execute(QUERIES["forget_tab_owners"], gone)
                for target, session_id in owners.items():
                    await conn.execute(QUERIES["save_tab_owner"], target, session_id)


@dataclass(frozen=True, slots=True)
class BrowserProfile:
    name: str
    allowed_origins: tuple[str, ...]
    blocked_origins: tuple[str, ...]
    created_at: datetime
    # The chat session using the profile now (None: none).
    session_id: str | None


def _profile(row: asyncpg.Record) -> BrowserProfile:
    return BrowserProfile(
        name=row["name"],
        allowed_origins=tuple(row["allowed_origins"]),
        blocked_origins=tuple(row["blocked_origins"]),
        created_at=row["created_at"],
        session_id=row["session_id"],
    )


class ProfileRepo:
    """Browser profiles (popagent_browser_profiles) and the sessions using them."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def list(self) -> list[BrowserProfile]:
        with wrap_db_errors():
            return [_profile(row) for row in await self.pool.fetch(QUERIES["list_profiles"])]

    async def get(self, name: str) -> BrowserProfile:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["get_profile"], name)
        if row is None:
            raise NotFound(f"browser profile {name!r} does not exist")
        return _profile(row)

    async def create(self, name: str, allowed: list[str], blocked: list[str]) -> BrowserProfile:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["create_profile"], name, allowed, blocked)
        if row is None:
            raise AlreadyExists(f"browser profile {name!r} already exists")
        return _profile(row)

    async def update_policy(self, name: str, allowed: list[str], blocked: list[str]) -> BrowserProfile:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["update_profile_policy"], name, allowed, blocked)
        if row is None:
            raise NotFound(f"browser profile {name!r} does not exist")
        return _profile(row)

    async def delete_unused(self, name: str) -> None:
        """Delete the profile unless a chat session uses it (Conflict naming the session)."""
        with wrap_db_errors():
            if await self.pool.fetchval(QUERIES["delete_unused_profile"], name) is not None:
                return
        profile = await self.get(name)
        raise Conflict(f"browser profile {name!r} is in use by chat session {profile.session_id}; release it first")

    async def session_profiles(self) -> dict[str, str]:
        with wrap_db_errors():
            return {
                row["session_id"]: row["profile_name"]
                for row in await self.pool.fetch(QUERIES["list_session_profiles"])
            }

    async def choose(self, session_id: str, name: str) -> None:
        try:
            with wrap_db_errors():
                await self.pool.execute(QUERIES["choose_session_profile"], session_id, name)
        except AlreadyExists:
            user = (await self.get(name)).session_id
            raise Conflict(f"browser profile {name!r} is in use by chat session {user}") from None
        except NotFound:
            raise NotFound(f"browser profile {name!r} does not exist") from None

    async def release(self, session_id: str) -> None:
        with wrap_db_errors():
            await self.pool.execute(QUERIES["release_session_profile"], session_id)


@dataclass(frozen=True, slots=True)
class RecordingFrame:
    seq: int
    taken_at: datetime
    operation: str
    arguments_json: str
    is_error: bool
    bytes: int


class RecordingRepo:
    """Each chat session's recording (popagent_browser_recording_frames), bounded per session."""

    def __init__(self, pool: asyncpg.Pool, *, max_frames: int, max_bytes: int) -> None:
        self.pool = pool
        self.max_frames = max_frames
        self.max_bytes = max_bytes

    async def add(self, session_id: str, operation: str, arguments_json: str, is_error: bool, png: bytes) -> None:
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(QUERIES["lock_recording"], session_id)
                await conn.execute(QUERIES["add_recording_frame"], session_id, operation, arguments_json, is_error, png)
                await conn.execute(QUERIES["trim_recording"], session_id, self.max_frames, self.max_bytes)

    async def frames(self, session_id: str) -> list[RecordingFrame]:
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["list_recording_frames"], session_id)
        return [
            RecordingFrame(
                seq=row["seq"],
                taken_at=row["taken_at"],
                operation=row["operation"],
                arguments_json=row["arguments_json"],
                is_error=row["is_error"],
                bytes=row["bytes"],
            )
            for row in rows
        ]

    async def image(self, session_id: str, seq: int) -> bytes:
        with wrap_db_errors():
            png = await self.pool.fetchval(QUERIES["get_recording_frame"], session_id, seq)
        if png is None:
            raise NotFound(f"chat session {session_id} has no recording frame {seq}")
        return bytes(png)

    async def delete(self, session_id: str) -> None:
        with wrap_db_errors():
            await self.pool.execute(QUERIES["delete_recording"], session_id)
