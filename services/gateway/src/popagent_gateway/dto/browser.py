"""/api/browser: the BifrOSt connection's health, the chat sessions' browser tabs, takeover,
browser profiles and their network policy, and the sessions' recordings."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, model_validator

from popagent_gateway.dto import WireInput, WireModel
from popagent_gateway.dto.secrets import HOST_PORT_PATTERN, MAX_ORIGIN_CHARS, ORIGIN_REGEX

HTTP_ORIGIN_PATTERN = rf"^https?://{HOST_PORT_PATTERN}$"


class BrowserHealthOut(WireModel):
    # The socket is configured (POPAGENT_BROWSER_SOCKET) and a live MCP session holds it.
    configured: bool
    reachable: bool
    socket_path: str
    server_name: str
    server_version: str
    tool_count: int
    # Why the browser is unavailable (empty while it works).
    last_error: str
    # The global browser setting.
    enabled: bool


class BrowserSessionOut(WireModel):
    session_id: str
    # A user holds the session's browser: the agent's browser operations are paused.
    taken_over: bool
    profile: str | None = Field(description="the browser profile the session uses; null: none")


# The viewport of a page is at most this many CSS pixels each way (browser-bridge's own bound).
MAX_INPUT_COORDINATE = 100_000
MAX_TYPED_CHARS = 4000
KEY_PATTERN = (
    r"^([^\x00-\x1f\x7f]|F[1-9]|F1[0-2]|Enter|Tab|Backspace|Delete|Escape|Space|Home|End|PageUp|PageDown"
    r"|Arrow(Up|Down|Left|Right))$"
)


class BrowserClick(WireInput):
    x: float = Field(ge=0, le=MAX_INPUT_COORDINATE, description="CSS pixels from the page's left edge")
    y: float = Field(ge=0, le=MAX_INPUT_COORDINATE, description="CSS pixels from the page's top edge")


class BrowserInput(WireInput):
    """One input of the user on a held page: exactly one of a click, text or a key."""

    SCHEMA_RULES: ClassVar[dict[str, Any]] = {
        "oneOf": [{"required": ["click"]}, {"required": ["text"]}, {"required": ["key"]}]
    }

    click: BrowserClick | None = Field(default=None, description="a click at a point of the screenshot")
    text: str | None = Field(
        default=None, min_length=1, max_length=MAX_TYPED_CHARS, description="typed into what has the focus"
    )
    key: str | None = Field(
        default=None,
        min_length=1,
        max_length=10,
        pattern=KEY_PATTERN,
        description="one character, or Enter, Tab, Backspace, Delete, Escape, Space, Home, End, PageUp, "
        "PageDown, ArrowUp/Down/Left/Right, F1-F12",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> BrowserInput:
        if sum(value is not None for value in (self.click, self.text, self.key)) != 1:
            raise ValueError("give exactly one of click, text or key")
        return self


class BrowserSessionsOut(WireModel):
    sessions: list[BrowserSessionOut]


class BrowserSessionClosedOut(WireModel):
    closed: bool


# browser-bridge's own rule for a profile name (it is the name of the profile's directory).
PROFILE_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
MAX_POLICY_ORIGINS = 200
ProfileName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=63,
        pattern=PROFILE_NAME_PATTERN,
        description="1-63 lower-case letters, digits, '-' or '_', starting with a letter or digit",
    ),
]
HttpOrigin = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_ORIGIN_CHARS,
        pattern=HTTP_ORIGIN_PATTERN,
        description="an http or https origin, scheme://host[:port], e.g. https://example.com",
    ),
]
Origins = Annotated[list[HttpOrigin], Field(max_length=MAX_POLICY_ORIGINS)]


class BrowserProfileOut(WireModel):
    name: str
    allowed_origins: list[str] = Field(
        description="the origins the profile's tabs may load; empty: every origin that is not blocked"
    )
    blocked_origins: list[str] = Field(description="origins the profile's tabs may never load (checked first)")
    session_id: str | None = Field(description="the chat session using the profile now; null: none")
    created_at: str


class BrowserProfileListOut(WireModel):
    profiles: list[BrowserProfileOut]


class BrowserProfileCreate(WireInput):
    model_config = ORIGIN_REGEX

    name: ProfileName
    allowed_origins: Origins = []
    blocked_origins: Origins = []


class BrowserProfilePolicy(WireInput):
    model_config = ORIGIN_REGEX

    allowed_origins: Origins
    blocked_origins: Origins


class BrowserSessionProfileChoice(WireInput):
    profile: ProfileName


class BrowserSessionProfileOut(WireModel):
    session_id: str
    profile: str | None = Field(description="the browser profile the session uses; null: none")


class BrowserRecordingFrameOut(WireModel):
    seq: int = Field(description="the frame's number in the session, from 1; GET …/recordings/{seq} is its PNG")
    taken_at: str
    operation: str
    arguments_json: str = Field(description="the operation's arguments as JSON, scrubbed of stored secret values")
    bytes: int
    is_error: bool


class BrowserRecordingOut(WireModel):
    session_id: str
    frames: list[BrowserRecordingFrameOut]
    max_frames: int = Field(description="the bound on frames kept per session (oldest dropped)")
    max_bytes: int = Field(description="the bound on screenshot bytes kept per session (oldest dropped)")
