"""AgentWorkspaceStore: repository definitions in popagent_agent_workspaces.

A repository path is stored relative to POPAGENT_WORKSPACE_ROOT and must resolve inside
it. Containment is decided on the real path (every symlink resolved) compared by path
components, never by string prefix, so `workspace-evil/` is not inside `workspace/`.

No workspace's folder may be, contain or lie inside another's (compared the same way): the
outer one's agents would change the inner one's files, `.git` included, from outside its
turns, and could swap the folders above its root. Registrations and path changes take one
lock so two of them cannot each pass the check against the other. A nested pair saved
before this check keeps working: each turn holds its own repository directory open (see
`workspace/paths.py`), so a swap cannot redirect it; changing either one's path is checked.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from popagent_core.db import wrap_db_errors
from popagent_core.errors import Conflict, FailedPrecondition, InvalidArgument, NotFound

DEFAULT_WORKSPACE_ID = "popagent"
MAX_PATH_CHARS = 1024
# Linux's NAME_MAX and PATH_MAX, in bytes of the UTF-8 name: past them every file system call
# on the path fails ("File name too long"), so such a path is refused before it is saved.
MAX_COMPONENT_BYTES = 255
MAX_REAL_PATH_BYTES = 4095
_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def _has_control_characters(value: str) -> bool:
    # Cc: controls, NUL included; Cs: lone surrogates, which no file name can hold.
    return any(unicodedata.category(char) in ("Cc", "Cs") for char in value)


def normalize_relative_path(raw: str) -> PurePosixPath:
    """The canonical relative form of a repository path, or InvalidArgument.

    Refuses absolute paths, `..` components, backslashes, control characters, lone
    surrogates, components over 255 bytes and the root itself; `.` components and duplicate
    slashes are dropped.
    """
    if not raw or len(raw) > MAX_PATH_CHARS:
        raise InvalidArgument(f"path must be 1 to {MAX_PATH_CHARS} characters")
    if _has_control_characters(raw) or "\\" in raw:
        raise InvalidArgument("path must not contain control characters, lone surrogates or backslashes")
    path = PurePosixPath(raw)
    if path.is_absolute():
        raise InvalidArgument("path must be relative to the workspace root")
    if ".." in path.parts:
        raise InvalidArgument("path must not contain '..'")
    parts = [part for part in path.parts if part != "."]
    if not parts:
        raise InvalidArgument("path must name a folder inside the workspace root, not the root itself")
    if any(len(part.encode()) > MAX_COMPONENT_BYTES for part in parts):
        raise InvalidArgument(f"path components must be at most {MAX_COMPONENT_BYTES} bytes each")
    return PurePosixPath(*parts)


def contained_path(root: Path, raw: str) -> tuple[PurePosixPath, Path]:
    """(normalized relative path, real absolute path) of `raw` under `root`, or InvalidArgument.

    The target need not exist yet (a registration may precede its checkout); every
    existing component, symlinks included, is resolved.
    """
    relative = normalize_relative_path(raw)
    real_root = Path(os.path.realpath(root))
    joined = real_root.joinpath(*relative.parts)
    if len(os.fsencode(joined)) > MAX_REAL_PATH_BYTES:
        raise InvalidArgument(
            f"path is too long: under the workspace root it must stay within {MAX_REAL_PATH_BYTES} bytes"
        )
    real = Path(os.path.realpath(joined))
    depth = len(real_root.parts)
    if real.parts[:depth] != real_root.parts or len(real.parts) <= depth:
        raise InvalidArgument("path must resolve inside the workspace root")
    return relative, real


def refuse_nesting(relative: PurePosixPath, real: Path, others: Iterable[tuple[str, Path]]) -> None:
    """Conflict when `real` is, contains or lies inside one of `others` ((id, real path))."""
    for other_id, other in others:
        shared = min(len(real.parts), len(other.parts))
        if real.parts[:shared] != other.parts[:shared]:
            continue
        if len(real.parts) == len(other.parts):
            where = f"is the folder of the workspace {other_id!r}"
        elif len(real.parts) > len(other.parts):
            where = f"is inside the folder of the workspace {other_id!r}"
        else:
            where = f"contains the folder of the workspace {other_id!r}"
        raise Conflict(
            f"path {str(relative)!r} {where}; a workspace cannot be registered in, around or on another "
            "(its agents could change the other's files and .git); choose a separate folder"
        )


@dataclass(frozen=True)
class WorkspaceRecord:
    id: str
    name: str
    path: str
    description: str
    exists: bool
    created_at: str
    updated_at: str

    @property
    def is_default(self) -> bool:
        return self.id == DEFAULT_WORKSPACE_ID


def slug(name: str) -> str:
    value = re.sub(r"[^a-z0-9]+", "-", unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().lower())
    return value.strip("-")[:63].strip("-")


class AgentWorkspaceStore:
    def __init__(self, pool: asyncpg.Pool, root: Path, queries: dict[str, str]) -> None:
        self.pool = pool
        self.root = root
        self.q = queries

    def _record(self, row: asyncpg.Record) -> WorkspaceRecord:
        try:
            _, real = contained_path(self.root, row["path"])
            exists = real.is_dir()
        except (InvalidArgument, OSError, ValueError):
            # A root moved after registration can leave a row pointing outside, and a row saved
            # before paths were checked this strictly may name what no file system call takes
            # ("File name too long"): it is listed as missing, so it can still be fixed or deleted.
            exists = False
        return WorkspaceRecord(
            id=row["id"],
            name=row["name"],
            path=row["path"],
            description=row["description"],
            exists=exists,
            created_at=row["created_at"].isoformat(),
            updated_at=row["updated_at"].isoformat(),
        )

    async def list(self) -> list[WorkspaceRecord]:
        with wrap_db_errors():
            rows = await self.pool.fetch(self.q["list_workspaces"])
        return [self._record(row) for row in rows]

    async def get(self, workspace_id: str) -> WorkspaceRecord:
        with wrap_db_errors():
            row = await self.pool.fetchrow(self.q["get_workspace"], workspace_id)
        if row is None:
            raise NotFound(f"workspace {workspace_id!r} not found")
        return self._record(row)

    async def exists(self, workspace_id: str) -> bool:
        with wrap_db_errors():
            return await self.pool.fetchrow(self.q["get_workspace"], workspace_id) is not None

    async def register(self, workspace_id: str, name: str, path: str, description: str) -> WorkspaceRecord:
        name = _name(name)
        workspace_id = workspace_id or slug(name)
        if not _ID.match(workspace_id):
            raise InvalidArgument(
                "id must be 1 to 63 lowercase letters, digits or '-', starting with a letter or digit"
            )
        relative, real = contained_path(self.root, path)
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(self.q["lock_workspace_registrations"])
                if await conn.fetchrow(self.q["get_workspace"], workspace_id) is not None:
                    raise Conflict(f"workspace {workspace_id!r} already exists")
                refuse_nesting(relative, real, await self._real_paths(conn, excluding=workspace_id))
                row = await conn.fetchrow(
                    self.q["create_workspace"], workspace_id, name, str(relative), _description(description)
                )
        if row is None:
            raise Conflict(f"workspace {workspace_id!r} already exists")
        return self._record(row)

    async def update(
        self, workspace_id: str, *, name: str | None, path: str | None, description: str | None
    ) -> WorkspaceRecord:
        moved = contained_path(self.root, path) if path is not None else None
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                if moved is not None:
                    await conn.execute(self.q["lock_workspace_registrations"])
                current = await conn.fetchrow(self.q["lock_workspace"], workspace_id)
                if current is None:
                    raise NotFound(f"workspace {workspace_id!r} not found")
                if moved is not None:
                    refuse_nesting(*moved, await self._real_paths(conn, excluding=workspace_id))
                row = await conn.fetchrow(
                    self.q["update_workspace"],
                    workspace_id,
                    _name(name) if name is not None else current["name"],
                    str(moved[0]) if moved is not None else current["path"],
                    _description(description) if description is not None else current["description"],
                )
        return self._record(row)

    async def _real_paths(
        self, conn: asyncpg.Connection | PoolConnectionProxy, *, excluding: str
    ) -> list[tuple[str, Path]]:
        """(id, real path) of every other registration whose path still resolves inside the root."""
        found: list[tuple[str, Path]] = []
        for row in await conn.fetch(self.q["list_workspaces"]):
            if row["id"] == excluding:
                continue
            try:
                found.append((row["id"], contained_path(self.root, row["path"])[1]))
            except (InvalidArgument, OSError, ValueError):
                continue  # a row no file system call takes reaches no folder
        return found

    async def delete(self, workspace_id: str) -> None:
        if workspace_id == DEFAULT_WORKSPACE_ID:
            raise FailedPrecondition("the default workspace cannot be deleted")
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                if await conn.fetchrow(self.q["lock_workspace"], workspace_id) is None:
                    raise NotFound(f"workspace {workspace_id!r} not found")
                sessions = await conn.fetchval(self.q["count_workspace_sessions"], workspace_id)
                if sessions:
                    raise Conflict(
                        f"workspace {workspace_id!r} still has {sessions} session(s); "
                        "delete them first (DELETE /api/workspaces/{id}/sessions)"
                    )
                await conn.execute(self.q["delete_workspace"], workspace_id)


def _name(value: str) -> str:
    value = value.strip()
    if not 1 <= len(value) <= 200 or _has_control_characters(value):
        raise InvalidArgument("name must be 1 to 200 printable characters")
    return value


def _description(value: str) -> str:
    if len(value) > 2000 or "\x00" in value:
        raise InvalidArgument("description must be at most 2000 characters")
    return value
