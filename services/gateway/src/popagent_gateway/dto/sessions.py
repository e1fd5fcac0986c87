"""Sessions: summaries, the full session with its AI SDK UI messages, and the save/patch bodies."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.json_schema import SkipJsonSchema

from popagent_gateway.dto import PatchModel, WireInput, WireModel

MAX_TITLE_CHARS = 500
MAX_MESSAGES = 2000
MAX_PARTS = 500
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
WORKSPACE_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"

# What a chat turn does while another runs on the same session: refused with 409 and the
# running turn's id (the default), or queued behind it.
DoubleTexting = Literal["reject", "enqueue", "interrupt", "rollback"]

SessionIdField = Annotated[str, Field(pattern=ID_PATTERN, min_length=1, max_length=128)]
# A session id or empty (none): a task's or a schedule's session, which its run creates.
OPTIONAL_SESSION_ID_PATTERN = r"^(?:[A-Za-z0-9][A-Za-z0-9_.:-]{0,127})?$"


class UIPart(BaseModel):
    """One AI SDK UI message part. `type` selects the shape (text, reasoning, file,
    step-start, tool-<name>, dynamic-tool, data-<name>, ...); the remaining fields belong
    to the AI SDK protocol and are stored as sent, so they are open here on purpose."""

    model_config = ConfigDict(extra="allow", strict=True)

    type: str = Field(min_length=1, max_length=200, pattern=r"^[a-z][A-Za-z0-9_-]*$")


class UIMessage(BaseModel):
    """An AI SDK UI message (`UIMessage` of the `ai` package)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: str = Field(min_length=1, max_length=200)
    role: Literal["system", "user", "assistant"]
    metadata: JsonValue = None
    parts: list[UIPart] = Field(max_length=MAX_PARTS)


class SessionSummary(WireModel):
    id: str
    title: str
    # Set by a user rename: later saves keep the title.
    title_locked: bool
    workspace_id: str
    # Send this back with the next save (optimistic lock).
    revision: int
    archived: bool
    archived_at: str | None
    created_at: str
    updated_at: str
    message_count: int
    double_texting: DoubleTexting


class QueuedTurnOut(WireModel):
    """A turn waiting to run on the session (doubleTexting 'enqueue'): its prompt runs when the turns before it end."""

    turn_id: str
    message: UIMessage
    queued_at: str


class MessageVersionsOut(WireModel):
    """A user message edited at least once: each edit is a version, a branch of the chat from that message on."""

    message_id: str
    versions: int = Field(description="how many versions the message has (2 or more)")
    shown: int = Field(description="the number, from 1, of the version shown in `messages`")


class SessionOut(SessionSummary):
    messages: list[UIMessage]
    # Oldest first; they run in this order, and each can be cancelled like a running turn.
    queued_turns: list[QueuedTurnOut]
    message_versions: list[MessageVersionsOut]


class SessionListOut(WireModel):
    sessions: list[SessionSummary]


class RevisionConflictOut(WireModel):
    error: Literal["revision conflict"]
    session: SessionOut


class MessageSearchQuery(BaseModel):
    """Query of GET /api/search/messages; unknown parameters are refused."""

    model_config = ConfigDict(extra="forbid")

    q: str = Field(
        min_length=1,
        max_length=500,
        description='words (every one must appear), "a phrase", -excluded, or: the web-search syntax',
    )
    limit: int = Field(default=20, ge=1, le=100)


class MessageMatchOut(WireModel):
    session_id: str
    title: str
    archived: bool
    updated_at: str
    message_id: str
    role: str
    created_at: str
    excerpt: str = Field(description="a short piece of the message around the matches, each between << and >>")


class MessageSearchOut(WireModel):
    matches: list[MessageMatchOut]


class SessionListQuery(BaseModel):
    """Query of GET /api/sessions; unknown parameters are refused."""

    model_config = ConfigDict(extra="forbid")

    archived: bool = Field(default=False, description="true: archived sessions instead of active ones")
    workspace_id: str | None = Field(
        default=None, alias="workspaceId", pattern=WORKSPACE_ID_PATTERN, description="only this workspace"
    )


class SessionCreate(WireInput):
    id: SessionIdField | SkipJsonSchema[None] = Field(default=None, description="omit to let the server choose one")
    title: str = Field(default="", max_length=MAX_TITLE_CHARS)
    workspace_id: Annotated[str, Field(pattern=WORKSPACE_ID_PATTERN, max_length=63)] | SkipJsonSchema[None] = Field(
        default=None, description="omit for the default workspace (popagent)"
    )


class SessionSave(WireInput):
    # 2**53 - 1: the largest integer every JSON reader (a JavaScript number, a float) holds exactly.
    revision: int = Field(ge=0, le=2**53 - 1, description="the revision this save is based on")
    title: Annotated[str, Field(max_length=MAX_TITLE_CHARS)] | SkipJsonSchema[None] = Field(
        default=None, description="ignored while the title is locked by a rename"
    )
    messages: list[UIMessage] = Field(max_length=MAX_MESSAGES)


class SessionPatch(PatchModel):
    title: Annotated[str, Field(min_length=1, max_length=MAX_TITLE_CHARS)] | SkipJsonSchema[None] = None
    archived: bool | SkipJsonSchema[None] = None
    double_texting: DoubleTexting | SkipJsonSchema[None] = Field(
        default=None,
        description="a chat turn sent while one runs: 'reject' (409 with runningTurnId), 'enqueue' (it waits, "
        "queued), 'interrupt' (the running turn is cancelled, its answer so far kept) or 'rollback' (the running "
        "turn is cancelled and its prompt and answer dropped)",
    )


class DeletedOut(WireModel):
    deleted: int


def summary_dict(session: Any) -> dict[str, Any]:
    """The wire form of a proto Session (no messages); built directly for speed."""
    return {
        "id": session.id,
        "title": session.title,
        "titleLocked": session.title_locked,
        "workspaceId": session.workspace_id,
        "revision": session.revision,
        "archived": bool(session.archived_at),
        "archivedAt": session.archived_at or None,
        "createdAt": session.created_at,
        "updatedAt": session.updated_at,
        "messageCount": session.message_count,
        "doubleTexting": session.double_texting or "reject",
    }
