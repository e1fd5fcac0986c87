"""The session's attachments: stored bounded and typed by their bytes, read back, copied into the workspace.

Limits (docs/attachments.md): 4 MiB a file, 8 files a message, 100 files a session.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath

import asyncpg

from popagent_agent_runner.attachments.sniff import sniff
from popagent_agent_runner.state.agents import AgentStore
from popagent_agent_runner.state.sessions import SessionStore
from popagent_agent_runner.state.workspaces import AgentWorkspaceStore, contained_path
from popagent_agent_runner.workspace.files import create_file
from popagent_agent_runner.workspace.paths import Repository, WorkspaceRefusal
from popagent_core.db import load_queries, record_of, wrap_db_errors
from popagent_core.errors import FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted

QUERIES = load_queries(Path(__file__).with_name("queries.sql"))

MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_PER_MESSAGE = 8
MAX_PER_SESSION = 100
MAX_FILENAME_CHARS = 255
# The agent whose workspace access decides whether a chat's attachment may be written into its workspace.
SUPERVISOR_ID = "popagent"


@dataclass(frozen=True, slots=True)
class AttachmentRecord:
    id: str
    session_id: str
    filename: str
    media_type: str
    size: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class LoadedAttachment:
    record: AttachmentRecord
    content: bytes


@dataclass(frozen=True, slots=True)
class CopiedAttachment:
    workspace_id: str
    path: str
    size: int


def clean_filename(raw: str) -> str:
    """The name's last path component, without control characters; never empty."""
    name = "".join(ch for ch in raw.replace("\\", "/").rsplit("/", 1)[-1] if ch.isprintable()).strip()
    if name in ("", ".", ".."):
        raise InvalidArgument("an attachment needs a file name")
    if len(name) > MAX_FILENAME_CHARS:
        raise InvalidArgument(f"the file name must be at most {MAX_FILENAME_CHARS} characters")
    return name


class AttachmentStore:
    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        sessions: SessionStore,
        workspaces: AgentWorkspaceStore,
        agents: AgentStore,
        workspace_root: Path,
    ) -> None:
        self.pool = pool
        self.sessions = sessions
        self.workspaces = workspaces
        self.agents = agents
        self.workspace_root = workspace_root

    async def add(self, session_id: str, filename: str, content: bytes) -> AttachmentRecord:
        name = clean_filename(filename)
        if not content:
            raise InvalidArgument(f"{name!r} is empty")
        if len(content) > MAX_FILE_BYTES:
            raise InvalidArgument(f"{name!r} is {len(content)} bytes; an attachment may be at most {MAX_FILE_BYTES}")
        media_type = sniff(name, content)
        attachment_id = f"att-{uuid.uuid4().hex}"
        with wrap_db_errors():
            row = await self.pool.fetchrow(
                QUERIES["insert_attachment"],
                attachment_id,
                session_id,
                name,
                media_type,
                len(content),
                content,
                MAX_PER_SESSION,
            )
        if row is None:
            await self.sessions.get(session_id)  # NotFound for an unknown session
            raise ResourceExhausted(f"a session holds at most {MAX_PER_SESSION} attachments")
        return record_of(AttachmentRecord, row)

    async def list(self, session_id: str) -> list[AttachmentRecord]:
        await self.sessions.get(session_id)
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["list_attachments"], session_id)
        return [record_of(AttachmentRecord, row) for row in rows]

    async def get(self, session_id: str, attachment_id: str) -> LoadedAttachment:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["get_attachment"], session_id, attachment_id)
        if row is None:
            raise NotFound(f"attachment {attachment_id!r} not found in session {session_id!r}")
        return LoadedAttachment(record_of(AttachmentRecord, row), bytes(row["content"]))

    async def copy_to_workspace(self, session_id: str, attachment_id: str, path: str) -> CopiedAttachment:
        """The attachment as a new file in the session's workspace, through the file tools' containment."""
        session = await self.sessions.get(session_id)
        loaded = await self.get(session_id, attachment_id)
        supervisor = next((agent for agent in await self.agents.list() if agent.id == SUPERVISOR_ID), None)
        if supervisor is None or supervisor.workspace_access != "read-write":
            access = supervisor.workspace_access if supervisor is not None else "none"
            raise FailedPrecondition(
                f"the chat's agent has {access!r} workspace access; copying a file in needs 'read-write' "
                "(Settings, Agents)"
            )
        workspace = await self.workspaces.get(session.workspace_id)
        _, real = contained_path(self.workspace_root, workspace.path)
        target = path or loaded.record.filename
        if PurePosixPath(target).is_absolute():
            raise InvalidArgument("path must be relative to the workspace")
        try:
            repository = Repository(real, workspace.id)
        except WorkspaceRefusal as exc:
            raise FailedPrecondition(f"the workspace {workspace.id!r} cannot be used: {exc}") from None
        try:
            written = await asyncio.to_thread(create_file, repository, target, loaded.content)
        except WorkspaceRefusal as exc:
            raise FailedPrecondition(f"the attachment cannot be written there: {exc}") from None
        finally:
            repository.close()
        return CopiedAttachment(workspace.id, written, loaded.record.size)
