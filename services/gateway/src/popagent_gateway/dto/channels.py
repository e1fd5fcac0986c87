"""Channel connections (docs/channels.md): a Slack, Telegram, Discord or Matrix bot whose conversations are
chat sessions. Credentials go in with a create or an update and never come back (`credentialsSet`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from popagent_gateway.dto import URL_PATTERN, PatchModel, WireInput, WireModel

CHANNEL_ID_PATTERN = r"^chn-[0-9a-f]{32}$"
Platform = Literal["slack", "telegram", "discord", "matrix"]
Name = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]+$")]
UserId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[\x21-\x7e]+$")]
Users = Annotated[list[UserId], Field(max_length=500)]
Url = Annotated[str, Field(max_length=2000, pattern=f"^({URL_PATTERN[1:-1]})?$")]
Credential = Annotated[str, Field(min_length=1, max_length=4000, pattern=r"^[\x21-\x7e]+$")]


class ChannelCredentials(WireInput):
    """The bot token (for Matrix, the bot user's access token) and the key the platform's deliveries are
    checked with: Slack's signing secret, Telegram's webhook secret token, or Discord's application
    public key (Matrix has none: the bot reads its rooms through /sync). Stored in the secrets service."""

    bot_token: Credential
    signing_secret: Credential | SkipJsonSchema[None] = None
    secret_token: Credential | SkipJsonSchema[None] = None
    public_key: Credential | SkipJsonSchema[None] = None


class ChannelOut(WireModel):
    id: str
    name: str
    platform: Platform
    workspace_id: str = Field(description="the workspace of its sessions; empty: the default one")
    allowed_users: list[str] = Field(description="platform user ids that may talk to the bot")
    approvers: list[str]
    bot_user_id: str = Field(description="the bot's own platform user id: its own messages are ignored")
    api_base_url: str = Field(description="the platform's Web API base URL; empty: the platform's own")
    credentials_set: bool = Field(description="whether credentials are stored (they are never returned)")
    enabled: bool
    created_at: str
    updated_at: str


class ChannelListOut(WireModel):
    channels: list[ChannelOut]


class ChannelCreate(WireInput):
    name: Name
    platform: Platform
    credentials: ChannelCredentials
    workspace_id: Annotated[str, Field(max_length=128, pattern=r"^[^\x00]*$")] | SkipJsonSchema[None] = None
    allowed_users: Users | SkipJsonSchema[None] = None
    approvers: Users | SkipJsonSchema[None] = None
    bot_user_id: Annotated[str, Field(max_length=64, pattern=r"^[\x21-\x7e]*$")] | SkipJsonSchema[None] = None
    api_base_url: Url | SkipJsonSchema[None] = None
    enabled: bool | SkipJsonSchema[None] = None


class ChannelPatch(PatchModel):
    name: Name | SkipJsonSchema[None] = None
    credentials: ChannelCredentials | SkipJsonSchema[None] = None
    workspace_id: Annotated[str, Field(max_length=128, pattern=r"^[^\x00]*$")] | SkipJsonSchema[None] = None
    allowed_users: Users | SkipJsonSchema[None] = None
    approvers: Users | SkipJsonSchema[None] = None
    bot_user_id: Annotated[str, Field(max_length=64, pattern=r"^[\x21-\x7e]*$")] | SkipJsonSchema[None] = None
    api_base_url: Url | SkipJsonSchema[None] = None
    enabled: bool | SkipJsonSchema[None] = None


class ChannelHistoryEntryOut(WireModel):
    id: int
    direction: Literal["in", "out", "error"]
    conversation: str
    thread: str
    platform_user: str
    session_id: str
    turn_id: str
    text: str
    created_at: str


class ChannelHistoryOut(WireModel):
    entries: list[ChannelHistoryEntryOut]


class ChannelPost(WireInput):
    conversation: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[\x21-\x7e]+$")]
    thread: Annotated[str, Field(max_length=256, pattern=r"^[\x21-\x7e]*$")] | SkipJsonSchema[None] = None
    text: Annotated[str, Field(min_length=1, max_length=100_000, pattern=r"\S")]


class ChannelPostOut(WireModel):
    message_ids: list[str]


class ChannelTurnCancelOut(WireModel):
    turn_id: str
    status: str
