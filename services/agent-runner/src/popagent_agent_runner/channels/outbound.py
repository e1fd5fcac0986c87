"""Posting to a platform: a message posted, then edited, in the platform's Markdown dialect and within
its size limit (a longer text goes out as follow-ups, never cut), each 429 retried after the
Retry-After the platform gave.

- Slack: slack_sdk's `AsyncWebClient` (`chat.postMessage`, `chat.update`) with `markdown_text`
  (standard Markdown, 12,000 characters), or a `markdown` block of the same with a Stop button under
  it while a reply streams (edits always as blocks, which replace the message's own); its
  rate-limit retry handler waits out Retry-After.
- Telegram: the Bot API's `sendMessage` / `editMessageText` with `parse_mode` MarkdownV2 (4,096
  characters); the token is part of the Bot API's URL, so these requests go through a transport the
  process-wide httpx tracing does not see (a span would record the URL).
- Discord: `POST /channels/{id}/messages` / `PATCH /channels/{id}/messages/{message}` with the bot
  token (2,000 characters, Discord's Markdown).
- Matrix (client-server API, the bot user's access token): `m.notice` events sent with
  `PUT /rooms/{room}/send/...`, in the thread (`m.thread` relation), edited with `m.replace`; the
  Markdown as `body` and as HTML (`formatted_body`, markdown-it with raw HTML escaped).

An approval card is a message with three buttons (Slack `actions` block, Telegram inline keyboard,
Discord action row; on Matrix, which has no buttons, three reactions the bot puts on the card for the
approver to add theirs to); settling it edits it to the outcome with the buttons (the bot's reactions)
removed.
"""

from __future__ import annotations

import asyncio
import re
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpcore
import httpx
from markdown_it import MarkdownIt
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from popagent_agent_runner.channels.inbound import (
    DECISIONS,
    MATRIX_REACTIONS,
    Decision,
    Press,
    button_id,
    stop_button_id,
)
from popagent_core.errors import FailedPrecondition, Unavailable

SLACK_API = "https://slack.com/api/"
TELEGRAM_API = "https://api.telegram.org"
DISCORD_API = "https://discord.com/api/v10"
# Matrix: an event is at most 65,536 bytes of JSON, and an edit carries the text four times (body and
# HTML, each in the edit and in m.new_content), in UTF-8 of up to 3 bytes a character.
LIMITS = {"slack": 12000, "telegram": 4096, "discord": 2000, "matrix": 4000}
# A platform asking for more than this before a retry is treated as down for now.
MAX_RETRY_AFTER_S = 60.0
MAX_RATE_LIMIT_RETRIES = 3
HTTP_TIMEOUT_S = 20.0
BUTTON_LABELS: dict[Decision, str] = {"once": "Approve", "deny": "Deny", "session": "Allow for this session"}


class PostFailed(FailedPrecondition):
    """The platform refused a post or an edit (its own error code in the message)."""


class Poster(Protocol):
    platform: str

    async def post(self, conversation: str, thread: str, text: str, stop: str = "") -> str:
        """Post `text` (already in the platform's dialect and within its limit); the message's id.
        `stop`: the turn a Stop button under it cancels, where the platform has buttons for it (Slack)."""
        ...

    async def edit(self, conversation: str, message_id: str, text: str, stop: str = "") -> None: ...

    async def post_card(self, conversation: str, thread: str, text: str, approval_id: str) -> str:
        """An approval card: `text` with Approve / Deny / Allow for this session buttons; its id."""
        ...

    async def settle_card(self, conversation: str, message_id: str, text: str) -> None:
        """The card edited to `text`, its buttons removed."""
        ...

    async def refuse_press(self, press: Press, text: str) -> None:
        """Tell only the presser why the press did nothing (where the platform can)."""
        ...

    async def took_press(self, press: Press) -> None:
        """Acknowledge a press the platform waits on (Telegram's spinning button)."""
        ...

    async def aclose(self) -> None: ...


# Telegram's MarkdownV2: these characters are escaped everywhere outside code.
_TELEGRAM_SPECIAL = re.compile(r"([_*\[\]()~`>#+\-=|{}.!\\])")
_CODE = re.compile(r"(```.*?(?:```|$)|`[^`\n]*`)", re.DOTALL)
_BOLD = re.compile(r"\*\*(.+?)\*\*", re.DOTALL)


def _telegram_markdown(text: str) -> str:
    """Standard Markdown as Telegram's MarkdownV2: code kept as code, **bold** as *bold*, every other
    special character escaped (so it shows as written instead of failing the whole message)."""
    out: list[str] = []
    for index, piece in enumerate(_CODE.split(text)):
        if index % 2:
            fence = "```" if piece.startswith("```") else "`"
            inner = piece[len(fence) :]
            inner = inner[: -len(fence)] if inner.endswith(fence) and len(inner) >= len(fence) else inner
            out.append(fence + inner.replace("\\", "\\\\").replace("`", "\\`") + fence)
            continue
        pos = 0
        for match in _BOLD.finditer(piece):
            out.append(_TELEGRAM_SPECIAL.sub(r"\\\1", piece[pos : match.start()]))
            out.append("*" + _TELEGRAM_SPECIAL.sub(r"\\\1", match.group(1)) + "*")
            pos = match.end()
        out.append(_TELEGRAM_SPECIAL.sub(r"\\\1", piece[pos:]))
    return "".join(out)


def render(platform: str, text: str) -> str:
    """Standard Markdown (what the model writes) in the platform's dialect."""
    return _telegram_markdown(text) if platform == "telegram" else text


def card_markdown(platform: str, text: str) -> str:
    """Standard Markdown as an approval card's dialect: Slack's `mrkdwn` (a block's text, where bold is
    `*x*`), Telegram's MarkdownV2, Discord's Markdown as it is."""
    if platform == "slack":
        return _BOLD.sub(r"*\1*", text)
    return render(platform, text)


def split_rendered(platform: str, text: str) -> list[str]:
    """`text` in the platform's dialect as messages within its limit, in order, nothing left out:
    cut at a paragraph, line or word break where one is near, else anywhere."""
    limit = LIMITS[platform]
    parts: list[str] = []
    rest = text
    while rest:
        rendered = render(platform, rest)
        if len(rendered) <= limit:
            parts.append(rendered)
            break
        cut = min(len(rest), limit)
        while cut > 1 and len(render(platform, rest[:cut])) > limit:
            cut = max(1, cut * limit // len(render(platform, rest[:cut])) - 1)
        for breaker in ("\n\n", "\n", " "):
            at = rest.rfind(breaker, 0, cut)
            if at > cut // 2:
                cut = at + len(breaker)
                break
        parts.append(render(platform, rest[:cut]))
        rest = rest[cut:]
    return parts or [render(platform, "…")]


def _retry_after(response: httpx.Response) -> float:
    header = response.headers.get("retry-after")
    seconds: float | None = None
    try:
        seconds = float(header) if header else None
    except ValueError:
        seconds = None
    if seconds is None:
        try:
            body = response.json()
        except ValueError:
            body = {}
        if isinstance(body, dict):
            value = body.get("retry_after", (body.get("parameters") or {}).get("retry_after"))
            seconds = float(value) if isinstance(value, (int, float)) else None
            # Matrix's M_LIMIT_EXCEEDED says it in milliseconds.
            millis = body.get("retry_after_ms")
            if seconds is None and isinstance(millis, (int, float)):
                seconds = millis / 1000
    return max(0.0, seconds if seconds is not None else 1.0)


async def _send(
    client: httpx.AsyncClient, method: str, url: str, body: dict[str, Any], sleep: Callable[[float], Any]
) -> httpx.Response:
    """The request, retried after each 429's Retry-After (at most MAX_RATE_LIMIT_RETRIES times)."""
    for _ in range(MAX_RATE_LIMIT_RETRIES + 1):
        try:
            response = await client.request(method, url, json=body)
        except httpx.HTTPError as exc:
            raise Unavailable(f"the platform could not be reached: {type(exc).__name__}") from None
        if response.status_code != 429:
            return response
        wait = _retry_after(response)
        if wait > MAX_RETRY_AFTER_S:
            break
        await sleep(wait)
    raise Unavailable("the platform kept answering 429 (rate limited)")


class _UntracedTransport(httpx.AsyncBaseTransport):
    """httpx over httpcore's pool without the process-wide tracing of httpx transports: the Bot API's
    URLs hold the bot token, and a span records a request's URL."""

    def __init__(self) -> None:
        self._pool = httpcore.AsyncConnectionPool(ssl_context=httpx.create_ssl_context(), http1=True)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await self._pool.handle_async_request(core)
            content = await response.aread()
        except httpcore.TimeoutException:
            raise httpx.TimeoutException("timed out", request=request) from None
        except httpcore.NetworkError:
            raise httpx.NetworkError("network error", request=request) from None
        await response.aclose()
        return httpx.Response(status_code=response.status, headers=response.headers, content=content)

    async def aclose(self) -> None:
        await self._pool.aclose()


@dataclass
class TelegramPoster:
    token: str
    base_url: str = TELEGRAM_API
    sleep: Callable[[float], Any] = asyncio.sleep
    platform: str = "telegram"

    def __post_init__(self) -> None:
        self._client = httpx.AsyncClient(transport=_UntracedTransport(), timeout=HTTP_TIMEOUT_S)

    def __repr__(self) -> str:
        return "TelegramPoster(<token>)"

    async def _call(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await _send(
            self._client, "POST", f"{self.base_url.rstrip('/')}/bot{self.token}/{method}", body, self.sleep
        )
        try:
            answer = response.json()
        except ValueError:
            answer = {}
        if not isinstance(answer, dict) or not answer.get("ok"):
            description = answer.get("description", "") if isinstance(answer, dict) else ""
            raise PostFailed(f"Telegram {method} failed: {response.status_code} {description}"[:300])
        return answer

    async def post(self, conversation: str, thread: str, text: str, stop: str = "") -> str:
        body: dict[str, Any] = {"chat_id": conversation, "text": text, "parse_mode": "MarkdownV2"}
        if thread:
            body["message_thread_id"] = int(thread)
        answer = await self._call("sendMessage", body)
        return str(answer["result"]["message_id"])

    async def edit(self, conversation: str, message_id: str, text: str, stop: str = "") -> None:
        try:
            await self._call(
                "editMessageText",
                {"chat_id": conversation, "message_id": int(message_id), "text": text, "parse_mode": "MarkdownV2"},
            )
        except PostFailed as exc:
            if "message is not modified" not in str(exc):
                raise

    async def post_card(self, conversation: str, thread: str, text: str, approval_id: str) -> str:
        keyboard = [[{"text": BUTTON_LABELS[d], "callback_data": button_id(d, approval_id)} for d in DECISIONS]]
        body: dict[str, Any] = {
            "chat_id": conversation,
            "text": text,
            "parse_mode": "MarkdownV2",
            "reply_markup": {"inline_keyboard": keyboard},
        }
        if thread:
            body["message_thread_id"] = int(thread)
        answer = await self._call("sendMessage", body)
        return str(answer["result"]["message_id"])

    async def settle_card(self, conversation: str, message_id: str, text: str) -> None:
        # An edit without reply_markup removes the inline keyboard.
        await self.edit(conversation, message_id, text)

    async def refuse_press(self, press: Press, text: str) -> None:
        await self._call(
            "answerCallbackQuery", {"callback_query_id": press.callback_id, "text": text[:200], "show_alert": True}
        )

    async def took_press(self, press: Press) -> None:
        await self._call("answerCallbackQuery", {"callback_query_id": press.callback_id})

    async def aclose(self) -> None:
        await self._client.aclose()


@dataclass
class DiscordPoster:
    token: str
    base_url: str = DISCORD_API
    sleep: Callable[[float], Any] = asyncio.sleep
    platform: str = "discord"

    def __post_init__(self) -> None:
        self._client = httpx.AsyncClient(
            headers={"Authorization": f"Bot {self.token}"}, timeout=HTTP_TIMEOUT_S, base_url=self.base_url
        )

    def __repr__(self) -> str:
        return "DiscordPoster(<token>)"

    async def _call(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await _send(self._client, method, path, body, self.sleep)
        if response.status_code >= 300:
            raise PostFailed(f"Discord {method} {path} failed: {response.status_code} {response.text}"[:300])
        return response.json()

    async def post(self, conversation: str, thread: str, text: str, stop: str = "") -> str:
        # A Discord thread is a channel of its own.
        answer = await self._call("POST", f"/channels/{thread or conversation}/messages", {"content": text})
        return str(answer["id"])

    async def edit(self, conversation: str, message_id: str, text: str, stop: str = "") -> None:
        await self._call("PATCH", f"/channels/{conversation}/messages/{message_id}", {"content": text})

    async def post_card(self, conversation: str, thread: str, text: str, approval_id: str) -> str:
        styles: dict[Decision, int] = {"once": 3, "deny": 4, "session": 1}  # green, red, blurple
        row = {
            "type": 1,
            "components": [
                {"type": 2, "style": styles[d], "label": BUTTON_LABELS[d], "custom_id": button_id(d, approval_id)}
                for d in DECISIONS
            ],
        }
        answer = await self._call(
            "POST", f"/channels/{thread or conversation}/messages", {"content": text, "components": [row]}
        )
        return str(answer["id"])

    async def settle_card(self, conversation: str, message_id: str, text: str) -> None:
        await self._call(
            "PATCH", f"/channels/{conversation}/messages/{message_id}", {"content": text, "components": []}
        )

    async def refuse_press(self, press: Press, text: str) -> None:
        """Nothing to call: a press's refusal is the interaction's own answer (inbound.discord_notice)."""

    async def took_press(self, press: Press) -> None:
        """Nothing to call: the interaction's answer updates the card (inbound.discord_card_update)."""

    async def aclose(self) -> None:
        await self._client.aclose()


class SlackPoster:
    platform = "slack"

    def __init__(self, token: str, base_url: str = SLACK_API) -> None:
        self._client = AsyncWebClient(
            token=token,
            base_url=base_url if base_url.endswith("/") else base_url + "/",
            timeout=int(HTTP_TIMEOUT_S),
            retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=MAX_RATE_LIMIT_RETRIES)],
        )

    def __repr__(self) -> str:
        return "SlackPoster(<token>)"

    @staticmethod
    def _reply_blocks(text: str, stop: str) -> list[dict[str, Any]]:
        """The reply as a `markdown` block (standard Markdown, like markdown_text, which cannot go with
        blocks), with a Stop button under it while its turn runs."""
        blocks: list[dict[str, Any]] = [{"type": "markdown", "text": text}]
        if stop:
            button = {
                "type": "button",
                "action_id": "popagent_stop",
                "text": {"type": "plain_text", "text": "Stop"},
                "style": "danger",
                "value": stop_button_id(stop),
            }
            blocks.append({"type": "actions", "elements": [button]})
        return blocks

    async def post(self, conversation: str, thread: str, text: str, stop: str = "") -> str:
        try:
            if stop:
                answer = await self._client.chat_postMessage(
                    channel=conversation, thread_ts=thread or None, text=text, blocks=self._reply_blocks(text, stop)
                )
            else:
                answer = await self._client.chat_postMessage(
                    channel=conversation, thread_ts=thread or None, markdown_text=text
                )
        except SlackApiError as exc:
            raise PostFailed(f"Slack chat.postMessage failed: {exc.response.get('error', 'unknown error')}") from None
        return str(answer["ts"])

    async def edit(self, conversation: str, message_id: str, text: str, stop: str = "") -> None:
        # Always as blocks: they replace the message's blocks, so an edit without `stop` removes the button.
        try:
            await self._client.chat_update(
                channel=conversation, ts=message_id, text=text, blocks=self._reply_blocks(text, stop)
            )
        except SlackApiError as exc:
            raise PostFailed(f"Slack chat.update failed: {exc.response.get('error', 'unknown error')}") from None

    async def tell(self, conversation: str, user: str, text: str) -> None:
        """A note only `user` sees."""
        try:
            await self._client.chat_postEphemeral(channel=conversation, user=user, text=text)
        except SlackApiError as exc:
            raise PostFailed(f"Slack chat.postEphemeral failed: {exc.response.get('error', 'unknown error')}") from None

    @staticmethod
    def _section(text: str) -> dict[str, Any]:
        return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}

    async def post_card(self, conversation: str, thread: str, text: str, approval_id: str) -> str:
        styles: dict[Decision, str] = {"once": "primary", "deny": "danger"}
        buttons: list[dict[str, Any]] = []
        for decision in DECISIONS:
            button: dict[str, Any] = {
                "type": "button",
                "action_id": f"popagent_{decision}",
                "text": {"type": "plain_text", "text": BUTTON_LABELS[decision]},
                "value": button_id(decision, approval_id),
            }
            if decision in styles:
                button["style"] = styles[decision]
            buttons.append(button)
        try:
            answer = await self._client.chat_postMessage(
                channel=conversation,
                thread_ts=thread or None,
                text=text[:3000],
                blocks=[self._section(text), {"type": "actions", "elements": buttons}],
            )
        except SlackApiError as exc:
            raise PostFailed(f"Slack chat.postMessage failed: {exc.response.get('error', 'unknown error')}") from None
        return str(answer["ts"])

    async def settle_card(self, conversation: str, message_id: str, text: str) -> None:
        try:
            await self._client.chat_update(
                channel=conversation, ts=message_id, text=text[:3000], blocks=[self._section(text)]
            )
        except SlackApiError as exc:
            raise PostFailed(f"Slack chat.update failed: {exc.response.get('error', 'unknown error')}") from None

    async def refuse_press(self, press: Press, text: str) -> None:
        try:
            await self._client.chat_postEphemeral(channel=press.conversation, user=press.user, text=text)
        except SlackApiError as exc:
            raise PostFailed(f"Slack chat.postEphemeral failed: {exc.response.get('error', 'unknown error')}") from None

    async def took_press(self, press: Press) -> None:
        """Nothing to call: Slack takes the webhook's 200 as the acknowledgement."""

    async def aclose(self) -> None:
        session = self._client.session
        if session is not None:
            await session.close()


# CommonMark with raw HTML escaped: the model's text cannot put markup of its own into formatted_body.
_MATRIX_HTML = MarkdownIt("commonmark", {"html": False})


def _matrix_content(text: str) -> dict[str, Any]:
    return {
        "msgtype": "m.notice",
        "body": text,
        "format": "org.matrix.custom.html",
        "formatted_body": _MATRIX_HTML.render(text).strip(),
    }


def _in_thread(thread: str) -> dict[str, Any]:
    """A message in the thread whose root event is `thread` (clients without threads see a reply to it)."""
    return {"rel_type": "m.thread", "event_id": thread, "is_falling_back": True, "m.in_reply_to": {"event_id": thread}}


@dataclass
class MatrixPoster:
    """The bot user of a homeserver, through the client-server API with its access token."""

    token: str
    base_url: str
    sleep: Callable[[float], Any] = asyncio.sleep
    platform: str = "matrix"

    def __post_init__(self) -> None:
        self._client = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=HTTP_TIMEOUT_S,
            base_url=self.base_url.rstrip("/") + "/_matrix/client/",
        )
        self._me = ""

    def __repr__(self) -> str:
        return "MatrixPoster(<token>)"

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        if method == "GET":
            try:
                response = await self._client.get(path)
            except httpx.HTTPError as exc:
                raise Unavailable(f"the homeserver could not be reached: {type(exc).__name__}") from None
        else:
            response = await _send(self._client, method, path, body or {}, self.sleep)
        if response.status_code >= 300:
            try:
                error = response.json()
            except ValueError:
                error = {}
            code = error.get("errcode", "") if isinstance(error, dict) else ""
            raise PostFailed(f"Matrix {method} {path.split('/')[1]} failed: {response.status_code} {code}"[:300])
        answer = response.json()
        return answer if isinstance(answer, dict) else {}

    async def _send_event(self, room: str, kind: str, content: dict[str, Any]) -> str:
        path = f"v3/rooms/{_quoted(room)}/send/{kind}/{uuid.uuid4().hex}"
        answer = await self._call("PUT", path, content)
        return str(answer.get("event_id", ""))

    async def post(self, conversation: str, thread: str, text: str, stop: str = "") -> str:
        content = _matrix_content(text)
        if thread:
            content["m.relates_to"] = _in_thread(thread)
        return await self._send_event(conversation, "m.room.message", content)

    async def edit(self, conversation: str, message_id: str, text: str, stop: str = "") -> None:
        new = _matrix_content(text)
        content = {
            **_matrix_content("* " + text),
            "m.new_content": new,
            "m.relates_to": {"rel_type": "m.replace", "event_id": message_id},
        }
        await self._send_event(conversation, "m.room.message", content)

    async def post_card(self, conversation: str, thread: str, text: str, approval_id: str) -> str:
        card = await self.post(conversation, thread, text)
        for decision in DECISIONS:
            reaction = {
                "m.relates_to": {"rel_type": "m.annotation", "event_id": card, "key": MATRIX_REACTIONS[decision]}
            }
            await self._send_event(conversation, "m.reaction", reaction)
        return card

    async def settle_card(self, conversation: str, message_id: str, text: str) -> None:
        await self.edit(conversation, message_id, text)
        # The card's "buttons": the bot's own reactions on it, taken back.
        if not self._me:
            self._me = str((await self._call("GET", "v3/account/whoami")).get("user_id", ""))
        relations = await self._call(
            "GET", f"v1/rooms/{_quoted(conversation)}/relations/{_quoted(message_id)}/m.annotation/m.reaction"
        )
        for event in relations.get("chunk") or []:
            if isinstance(event, dict) and event.get("sender") == self._me:
                path = (
                    f"v3/rooms/{_quoted(conversation)}/redact/{_quoted(str(event.get('event_id')))}/{uuid.uuid4().hex}"
                )
                await self._call("PUT", path, {"reason": "answered"})

    async def refuse_press(self, press: Press, text: str) -> None:
        content = _matrix_content(f"{press.user}: {text}")
        content["m.relates_to"] = {"m.in_reply_to": {"event_id": press.message_id}}
        await self._send_event(press.conversation, "m.room.message", content)

    async def took_press(self, press: Press) -> None:
        """Nothing to call: a reaction needs no acknowledgement."""

    async def join(self, room: str) -> None:
        await self._call("POST", f"v3/join/{_quoted(room)}", {})

    async def sync(self, since: str, timeout_s: float) -> dict[str, Any]:
        """One /sync long-poll: what happened in the bot's rooms after `since` ("" the first time:
        the rooms as they are, their timelines cut to nothing, so nothing said before is answered)."""
        params: dict[str, str] = {"timeout": str(int(timeout_s * 1000))}
        if since:
            params["since"] = since
        else:
            params["filter"] = '{"room":{"timeline":{"limit":0}}}'
        try:
            response = await self._client.get("v3/sync", params=params, timeout=timeout_s + HTTP_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise Unavailable(f"the homeserver could not be reached: {type(exc).__name__}") from None
        if response.status_code == 429:
            await self.sleep(min(_retry_after(response), MAX_RETRY_AFTER_S))
            return {"next_batch": since}
        if response.status_code >= 300:
            raise PostFailed(f"Matrix sync failed: {response.status_code}")
        answer = response.json()
        return answer if isinstance(answer, dict) else {}

    async def aclose(self) -> None:
        await self._client.aclose()


def _quoted(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def poster_for(platform: str, token: str, base_url: str) -> Poster:
    if platform == "slack":
        return SlackPoster(token, base_url or SLACK_API)
    if platform == "telegram":
        return TelegramPoster(token, base_url or TELEGRAM_API)
    if platform == "matrix":
        return MatrixPoster(token, base_url)
    return DiscordPoster(token, base_url or DISCORD_API)
