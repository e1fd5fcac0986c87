"""What the channel tests share: a connection to a stand-in, signed Slack headers, Telegram updates,
a workspace for a channel's sessions, the approvals of a connection's sessions and a thread's card."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from channels.standins import Message, PlatformStandIn, dumps
from support.stacks import Stack
from support.waiting import eventually

SIGNING_SECRET = "slack-signing-" + uuid.uuid4().hex


def slack_headers(body: bytes, *, secret: str = SIGNING_SECRET, at: float | None = None) -> dict[str, str]:
    timestamp = str(int(at if at is not None else time.time()))
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": f"v0={digest}",
        "Content-Type": "application/json",
    }


async def connect(client: httpx.AsyncClient, platform: str, standin: PlatformStandIn, **extra: Any) -> dict[str, Any]:
    credentials = (
        {"botToken": standin.token, "signingSecret": SIGNING_SECRET}
        if platform == "slack"
        else {"botToken": standin.token, "secretToken": "tg-secret-1"}
    )
    body = {
        "name": f"{platform}-{uuid.uuid4().hex[:8]}",
        "platform": platform,
        "credentials": credentials,
        "allowedUsers": ["U1", "42"],
        "apiBaseUrl": standin.url,
        **extra,
    }
    created = await client.post("/api/channels", json=body)
    assert created.status_code == 201, created.text
    return created.json()


def telegram_update(update_id: int, chat_id: int, text: str, *, user: int = 42) -> dict[str, Any]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "from": {"id": user, "is_bot": False, "first_name": "Ada"},
            "chat": {"id": chat_id, "type": "private"},
            "date": int(time.time()),
            "text": text,
        },
    }


async def deliver_telegram(
    client: httpx.AsyncClient, channel_id: str, update: dict[str, Any], secret: str = "tg-secret-1"
) -> httpx.Response:
    return await client.post(
        f"/api/channels/{channel_id}/events",
        content=dumps(update),
        headers={"X-Telegram-Bot-Api-Secret-Token": secret, "Content-Type": "application/json"},
    )


WRITE = "mastra_workspace_write_file"


async def channel_workspace(stack: Stack, client: httpx.AsyncClient) -> tuple[str, Path]:
    name = f"chan-{uuid.uuid4().hex[:8]}"
    folder = stack.workspace_root / name
    folder.mkdir()
    created = await client.post("/api/workspaces", json={"id": name, "name": name, "path": name})
    assert created.status_code == 201, created.text
    return name, folder


async def approval_states(stack: Stack, channel_id: str) -> list[tuple[str, str | None]]:
    async with stack.db() as conn:
        rows = await conn.fetch(
            "SELECT a.state, a.answered_by FROM popagent_approvals a"
            " JOIN popagent_channel_conversations c ON c.session_id = a.session_id"
            " WHERE c.connection_id = $1 ORDER BY a.created_at",
            channel_id,
        )
    return [(row["state"], row["answered_by"]) for row in rows]


def card_of(standin: PlatformStandIn, conversation: str) -> Message | None:
    # A streaming Slack reply's Stop button makes no card.
    cards = [m for m in standin.in_conversation(conversation) if m.buttons and not m.buttons[0].startswith("stop:")]
    return cards[0] if cards else None


async def card_posted(standin: PlatformStandIn, conversation: str) -> Message:
    """The conversation's approval card, once posted."""
    card = await eventually(lambda: card_of(standin, conversation), until=lambda c: c is not None, within=30)
    assert card is not None
    return card
