"""Stand-ins for the platforms' Web APIs, on loopback, speaking each one's documented HTTP shape:
Slack's Web API (`chat.postMessage`, `chat.update`, `chat.postEphemeral`: form or JSON with a bearer
token, `{"ok": ...}` answers, 429 with Retry-After, `msg_too_long` beyond 12,000 characters of
`markdown_text`; `blocks` kept unless an update replaces them), Telegram's Bot API
(`/bot<token>/sendMessage`, `editMessageText`, `answerCallbackQuery`: 401 for a wrong token, 400
"message is too long" beyond 4,096 characters, 429 with `parameters.retry_after`; an edit without
`reply_markup` drops the inline keyboard) and Discord's REST API (`/channels/{id}/messages`:
`Authorization: Bot`, 50035 beyond 2,000 characters, 429 with `retry_after`)."""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

SLACK_MARKDOWN_LIMIT = 12000
TELEGRAM_LIMIT = 4096
DISCORD_LIMIT = 2000


@dataclass
class Message:
    id: str
    conversation: str
    thread: str
    text: str
    edits: int = 0
    # The values of the message's buttons (Slack button values, Telegram callback_data, Discord custom_ids).
    buttons: list[str] = field(default_factory=list[str])
    posted_at: float = field(default_factory=time.monotonic)


@dataclass
class PlatformStandIn:
    token: str
    url: str = ""
    messages: dict[str, Message] = field(default_factory=dict[str, Message])
    # Every call as (method, body).
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list[tuple[str, dict[str, Any]]])
    # The next N calls of a method answer 429 with this Retry-After.
    rate_limited: dict[str, int] = field(default_factory=dict[str, int])
    retry_after_s: int = 1
    # Slack: chat.update of a message older than this answers `cant_update_message` (None: never).
    edit_expiry_s: float | None = None
    # Messages only one user saw: (user or callback query id, text).
    private: list[tuple[str, str]] = field(default_factory=list[tuple[str, str]])
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))

    def limited(self, method: str) -> bool:
        left = self.rate_limited.get(method, 0)
        if left:
            self.rate_limited[method] = left - 1
        return bool(left)

    def in_conversation(self, conversation: str) -> list[Message]:
        return [m for m in self.messages.values() if m.conversation == conversation]


def _slack_app(standin: PlatformStandIn) -> web.Application:
    async def method(request: web.Request) -> web.Response:
        name = request.match_info["method"]
        if request.headers.get("Authorization") != f"Bearer {standin.token}":
            return web.json_response({"ok": False, "error": "invalid_auth"})
        body: dict[str, Any]
        if request.content_type == "application/json":
            body = await request.json()
        else:
            body = {name: str(value) for name, value in (await request.post()).items()}
        standin.calls.append((name, body))
        if standin.limited(name):
            return web.json_response(
                {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": str(standin.retry_after_s)}
            )
        text = str(body.get("markdown_text") or body.get("text") or "")
        if len(text) > SLACK_MARKDOWN_LIMIT:
            return web.json_response({"ok": False, "error": "msg_too_long"})
        blocks = body.get("blocks")
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        if name == "chat.postMessage":
            ts = f"{next(standin._ids)}.000100"
            standin.messages[ts] = Message(
                ts, str(body["channel"]), str(body.get("thread_ts") or ""), text, buttons=_slack_buttons(blocks)
            )
            return web.json_response({"ok": True, "channel": body["channel"], "ts": ts})
        if name == "chat.update":
            message = standin.messages.get(str(body.get("ts", "")))
            if message is None:
                return web.json_response({"ok": False, "error": "message_not_found"})
            if standin.edit_expiry_s is not None and time.monotonic() - message.posted_at > standin.edit_expiry_s:
                return web.json_response({"ok": False, "error": "cant_update_message"})
            message.text, message.edits = text, message.edits + 1
            if blocks is not None:
                message.buttons = _slack_buttons(blocks)
            return web.json_response({"ok": True, "channel": body["channel"], "ts": message.id})
        if name == "chat.postEphemeral":
            standin.private.append((str(body["user"]), text))
            return web.json_response({"ok": True, "message_ts": f"{next(standin._ids)}.000200"})
        return web.json_response({"ok": False, "error": "unknown_method"})

    app = web.Application()
    app.router.add_post("/api/{method}", method)
    return app


def _slack_buttons(blocks: object) -> list[str]:
    if not isinstance(blocks, list):
        return []
    return [
        str(element.get("value"))
        for block in blocks
        if isinstance(block, dict) and block.get("type") == "actions"
        for element in block.get("elements", [])
        if isinstance(element, dict) and element.get("type") == "button"
    ]


def _telegram_buttons(markup: object) -> list[str]:
    if not isinstance(markup, dict):
        return []
    return [str(button["callback_data"]) for row in markup.get("inline_keyboard", []) for button in row]


def _telegram_app(standin: PlatformStandIn) -> web.Application:
    async def method(request: web.Request) -> web.Response:
        if request.match_info["token"] != standin.token:
            return web.json_response({"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401)
        name = request.match_info["method"]
        body = await request.json()
        standin.calls.append((name, body))
        if standin.limited(name):
            return web.json_response(
                {
                    "ok": False,
                    "error_code": 429,
                    "description": f"Too Many Requests: retry after {standin.retry_after_s}",
                    "parameters": {"retry_after": standin.retry_after_s},
                },
                status=429,
            )
        text = body.get("text", "")
        if len(text) > TELEGRAM_LIMIT:
            return web.json_response(
                {"ok": False, "error_code": 400, "description": "Bad Request: message is too long"}, status=400
            )
        if name == "sendMessage":
            message_id = next(standin._ids)
            standin.messages[str(message_id)] = Message(
                str(message_id),
                str(body["chat_id"]),
                str(body.get("message_thread_id", "")),
                text,
                buttons=_telegram_buttons(body.get("reply_markup")),
            )
            return web.json_response({"ok": True, "result": {"message_id": message_id, "text": text}})
        if name == "editMessageText":
            message = standin.messages.get(str(body.get("message_id")))
            if message is None:
                return web.json_response(
                    {"ok": False, "error_code": 400, "description": "Bad Request: message to edit not found"},
                    status=400,
                )
            if message.text == text:
                return web.json_response(
                    {"ok": False, "error_code": 400, "description": "Bad Request: message is not modified"}, status=400
                )
            message.text, message.edits = text, message.edits + 1
            message.buttons = _telegram_buttons(body.get("reply_markup"))
            return web.json_response({"ok": True, "result": {"message_id": int(message.id), "text": text}})
        if name == "answerCallbackQuery":
            standin.private.append((str(body["callback_query_id"]), str(body.get("text", ""))))
            return web.json_response({"ok": True, "result": True})
        return web.json_response({"ok": False, "error_code": 404, "description": "Not Found"}, status=404)

    app = web.Application()
    app.router.add_post("/bot{token}/{method}", method)
    return app


def _discord_buttons(components: object) -> list[str]:
    if not isinstance(components, list):
        return []
    return [
        str(button["custom_id"])
        for row in components
        if isinstance(row, dict)
        for button in row.get("components", [])
        if isinstance(button, dict) and button.get("type") == 2
    ]


def _discord_app(standin: PlatformStandIn) -> web.Application:
    async def message(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bot {standin.token}":
            return web.json_response({"message": "401: Unauthorized", "code": 0}, status=401)
        name = f"{request.method} messages"
        body = await request.json()
        standin.calls.append((name, body))
        if standin.limited(name):
            return web.json_response(
                {"message": "You are being rate limited.", "retry_after": standin.retry_after_s, "global": False},
                status=429,
                headers={"Retry-After": str(standin.retry_after_s)},
            )
        text = str(body.get("content", ""))
        if len(text) > DISCORD_LIMIT:
            return web.json_response(
                {
                    "message": "Invalid Form Body",
                    "code": 50035,
                    "errors": {"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH"}]}},
                },
                status=400,
            )
        channel = request.match_info["channel"]
        if request.method == "POST":
            message_id = str(next(standin._ids))
            standin.messages[message_id] = Message(
                message_id, channel, "", text, buttons=_discord_buttons(body.get("components"))
            )
            return web.json_response({"id": message_id, "channel_id": channel, "content": text})
        found = standin.messages.get(request.match_info.get("message", ""))
        if found is None or found.conversation != channel:
            return web.json_response({"message": "Unknown Message", "code": 10008}, status=404)
        if "content" in body:
            found.text, found.edits = text, found.edits + 1
        if "components" in body:
            found.buttons = _discord_buttons(body["components"])
        return web.json_response({"id": found.id, "channel_id": channel, "content": found.text})

    app = web.Application()
    app.router.add_post("/api/v10/channels/{channel}/messages", message)
    app.router.add_patch("/api/v10/channels/{channel}/messages/{message}", message)
    return app


@contextlib.asynccontextmanager
async def serving(kind: str, token: str) -> AsyncIterator[PlatformStandIn]:
    standin = PlatformStandIn(token)
    apps = {"slack": _slack_app, "telegram": _telegram_app, "discord": _discord_app}
    app = apps[kind](standin)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    standin.url = f"http://127.0.0.1:{port}" + {"slack": "/api/", "telegram": "", "discord": "/api/v10"}[kind]
    try:
        yield standin
    finally:
        await runner.cleanup()


def dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
