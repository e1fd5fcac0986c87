"""A platform's delivery to POST /api/channels/{id}/events: its signature checked on the raw body
before anything parses it, then what it says (a message, a handshake, or nothing for us).

- Slack (Events API): `X-Slack-Signature` over `v0:{X-Slack-Request-Timestamp}:{body}` with the
  app's signing secret, the timestamp within 5 minutes (slack_sdk's `SignatureVerifier`);
  `url_verification` answers its challenge; messages are `event_callback`s with an `event_id`; a
  button press is an interactivity payload (`payload=` form field, `block_actions`) on the same URL,
  signed the same way.
- Telegram (Bot API webhook): `X-Telegram-Bot-Api-Secret-Token` equals the `secret_token` the
  webhook was set with (compared in constant time); an update's `update_id` is its event id; a
  button press is a `callback_query` update.
- Matrix: no webhook. The bot reads its rooms through its own authenticated /sync long-poll
  (`matrix_deliveries`), so what the homeserver answers is already the homeserver's word: the sender
  of each event is the user id the homeserver checked. An event id is the event id; a message in a
  thread (`m.thread` relation) belongs to its root's thread, a top-level message starts its own; a
  reaction (`m.annotation`) on an approval card is a press.
- Discord (interactions endpoint): `X-Signature-Ed25519` over `{X-Signature-Timestamp}{body}` with
  the application's public key (PyNaCl); PING (type 1) answers PONG; a slash command (type 2) is a
  message, its interaction id the event id; a button press is a message component (type 3), answered
  with the card's new content (UPDATE_MESSAGE, type 7).
"""

from __future__ import annotations

import hmac
import urllib.parse
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey
from slack_sdk.signature import Clock, SignatureVerifier

from popagent_core.errors import InvalidArgument, Unauthenticated

# Slack's documented replay window for a request's timestamp.
SLACK_WINDOW_S = 300
DISCORD_PING = 1
DISCORD_COMMAND = 2
DISCORD_COMPONENT = 3
DISCORD_PONG = 1
# Answers a command at once with a message (the prompt, quoted); the reply follows in the channel, posted
# with the bot token and edited as it streams.
DISCORD_MESSAGE = 4
# Answers a button press by replacing the pressed message's content and components.
DISCORD_UPDATE_MESSAGE = 7
# A message only the presser sees.
DISCORD_EPHEMERAL = 64
DISCORD_MAX_CHARS = 2000


@dataclass(frozen=True)
class Message:
    """A user's text in a conversation and thread, with the platform's id of its delivery."""

    event_id: str
    conversation: str
    thread: str
    user: str
    text: str
    # Where a reply in the same thread goes: Slack's thread_ts, Telegram's message_thread_id; "" for none.
    reply_thread: str = ""


Decision = Literal["once", "session", "deny"]
DECISIONS: tuple[Decision, ...] = ("once", "deny", "session")


# Matrix has no buttons: an approval card is answered by reacting (an m.annotation) with one of these.
MATRIX_REACTIONS: dict[Decision, str] = {"once": "✅", "deny": "❌", "session": "🔁"}
_MATRIX_DECISIONS: dict[str, Decision] = {key: decision for decision, key in MATRIX_REACTIONS.items()}


def button_id(decision: Decision, approval_id: str) -> str:
    """What a card's button carries back (Slack's value, Telegram's callback_data of at most 64 bytes,
    Discord's custom_id)."""
    return f"{decision}:{approval_id}"


def _button(value: str) -> tuple[Decision, str] | None:
    decision, _, approval_id = value.partition(":")
    for known in DECISIONS:
        if decision == known and approval_id:
            return known, approval_id
    return None


@dataclass(frozen=True)
class Press:
    """A button pressed on an approval card, by the user the platform's signed delivery names."""

    approval_id: str
    decision: Decision
    user: str
    conversation: str
    # The card's message id.
    message_id: str
    # Telegram's callback query id, answered so the button stops spinning; "" elsewhere.
    callback_id: str = ""


@dataclass(frozen=True)
class StopPress:
    """Slack's Stop button on a streaming reply pressed, by the user the signed delivery names."""

    turn_id: str
    user: str
    conversation: str


def stop_button_id(turn_id: str) -> str:
    return f"stop:{turn_id}"


@dataclass(frozen=True)
class Answer:
    """What the webhook answers the platform (its own status and body)."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"


@dataclass(frozen=True)
class Delivery:
    """A checked delivery: the platform's answer, and the message to act on (None: nothing to do)."""

    answer: Answer
    message: Message | None = None
    # The platform's id of the delivery, when it has one (deduplicated even when it carries no message).
    event_id: str = ""
    # Sent by the bot itself (or another bot): never a turn.
    from_bot: bool = False
    press: Press | None = None
    stop: StopPress | None = None


def _header(headers: dict[str, str], name: str) -> str:
    return headers.get(name.lower(), "")


def verify(platform: str, inbound_key: str, headers: dict[str, str], body: bytes, *, now: float | None = None) -> None:
    """Unauthenticated unless the delivery carries the platform's valid signature for this body."""
    if platform == "slack":
        verifier = SignatureVerifier(inbound_key) if now is None else SignatureVerifier(inbound_key, _FixedClock(now))
        timestamp = _header(headers, "x-slack-request-timestamp")
        if not timestamp.isdigit() or not verifier.is_valid(body, timestamp, _header(headers, "x-slack-signature")):
            raise Unauthenticated("the Slack signature is missing, forged or older than 5 minutes")
        return
    if platform == "telegram":
        given = _header(headers, "x-telegram-bot-api-secret-token")
        if not given or not hmac.compare_digest(given.encode(), inbound_key.encode()):
            raise Unauthenticated("the Telegram secret token is missing or wrong")
        return
    if platform == "discord":
        signature = _header(headers, "x-signature-ed25519")
        timestamp = _header(headers, "x-signature-timestamp")
        try:
            VerifyKey(bytes.fromhex(inbound_key)).verify(timestamp.encode() + body, bytes.fromhex(signature))
        except (BadSignatureError, ValueError):
            raise Unauthenticated("the Discord signature is missing or forged") from None
        return
    raise InvalidArgument(f"unknown platform {platform!r}")


class _FixedClock(Clock):
    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now


def _json(body: bytes) -> dict[str, Any]:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InvalidArgument("the delivery is not JSON") from None
    if not isinstance(parsed, dict):
        raise InvalidArgument("the delivery is not a JSON object")
    return parsed  # type: ignore[return-value]


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _id(value: object) -> str:
    if isinstance(value, bool):
        return ""
    if isinstance(value, (int, str)):
        return str(value)
    return ""


def parse(platform: str, body: bytes, bot_user_id: str) -> Delivery:
    """What a verified delivery says. Call only after `verify`."""
    if platform == "slack" and body.startswith(b"payload="):
        return _slack_interaction(body)
    payload = _json(body)
    if platform == "slack":
        return _slack(payload, bot_user_id)
    if platform == "telegram":
        return _telegram(payload, bot_user_id)
    return _discord(payload)


def _slack(payload: dict[str, Any], bot_user_id: str) -> Delivery:
    kind = payload.get("type")
    if kind == "url_verification":
        return Delivery(Answer(body=orjson.dumps({"challenge": _text(payload.get("challenge"))})))
    event_id = _text(payload.get("event_id"))
    event = payload.get("event")
    if kind != "event_callback" or not isinstance(event, dict) or not event_id:
        return Delivery(Answer(), event_id=event_id)
    event_type = event.get("type")
    if event_type not in ("message", "app_mention"):
        return Delivery(Answer(), event_id=event_id)
    user = _text(event.get("user"))
    # Bot posts (ours included) carry bot_id or the bot_message subtype; edits and joins carry other subtypes.
    from_bot = (
        bool(event.get("bot_id")) or event.get("subtype") == "bot_message" or (bool(user) and user == bot_user_id)
    )
    if from_bot or event.get("subtype"):
        return Delivery(Answer(), event_id=event_id, from_bot=from_bot)
    ts = _text(event.get("ts"))
    thread = _text(event.get("thread_ts")) or ts
    message = Message(
        event_id=event_id,
        conversation=_text(event.get("channel")),
        thread=thread,
        user=user,
        text=_text(event.get("text")),
        reply_thread=thread,
    )
    return Delivery(Answer(), message=message, event_id=event_id)


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}  # type: ignore[return-value]


def _slack_interaction(body: bytes) -> Delivery:
    """An interactivity payload: a button of an approval card pressed (other interactions are ignored)."""
    fields = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
    payload = _json((fields.get("payload") or [""])[0].encode())
    if payload.get("type") != "block_actions":
        return Delivery(Answer())
    actions = payload.get("actions")
    action = _dict(actions[0]) if isinstance(actions, list) and actions else {}
    value = _text(action.get("value"))
    container = _dict(payload.get("container"))
    if value.startswith("stop:") and len(value) > len("stop:"):
        stop = StopPress(
            turn_id=value[len("stop:") :],
            user=_text(_dict(payload.get("user")).get("id")),
            conversation=_text(_dict(payload.get("channel")).get("id")) or _text(container.get("channel_id")),
        )
        return Delivery(Answer(), stop=stop)
    button = _button(value)
    if button is None:
        return Delivery(Answer())
    press = Press(
        approval_id=button[1],
        decision=button[0],
        user=_text(_dict(payload.get("user")).get("id")),
        conversation=_text(_dict(payload.get("channel")).get("id")) or _text(container.get("channel_id")),
        message_id=_text(container.get("message_ts")) or _text(_dict(payload.get("message")).get("ts")),
    )
    return Delivery(Answer(), press=press)


def _telegram(payload: dict[str, Any], bot_user_id: str) -> Delivery:
    event_id = _id(payload.get("update_id"))
    query = payload.get("callback_query")
    if isinstance(query, dict):
        button = _button(_text(query.get("data")))
        card = _dict(query.get("message"))
        if button is None:
            return Delivery(Answer(), event_id=event_id)
        press = Press(
            approval_id=button[1],
            decision=button[0],
            user=_id(_dict(query.get("from")).get("id")),
            conversation=_id(_dict(card.get("chat")).get("id")),
            message_id=_id(card.get("message_id")),
            callback_id=_text(query.get("id")),
        )
        return Delivery(Answer(), event_id=event_id, press=press)
    message = payload.get("message")
    if not isinstance(message, dict):
        return Delivery(Answer(), event_id=event_id)
    sender = message.get("from") if isinstance(message.get("from"), dict) else {}
    assert isinstance(sender, dict)
    user = _id(sender.get("id"))
    if sender.get("is_bot") is True or (user and user == bot_user_id):
        return Delivery(Answer(), event_id=event_id, from_bot=True)
    chat = message.get("chat") if isinstance(message.get("chat"), dict) else {}
    assert isinstance(chat, dict)
    # A forum topic is its own thread; a plain chat has one.
    thread = _id(message.get("message_thread_id")) if message.get("is_topic_message") else ""
    text = _text(message.get("text"))
    if not text:
        return Delivery(Answer(), event_id=event_id)
    return Delivery(
        Answer(),
        message=Message(event_id, _id(chat.get("id")), thread, user, text, reply_thread=thread),
        event_id=event_id,
    )


def _discord(payload: dict[str, Any]) -> Delivery:
    kind = payload.get("type")
    if kind == DISCORD_PING:
        return Delivery(Answer(body=orjson.dumps({"type": DISCORD_PONG})))
    event_id = _id(payload.get("id"))
    if kind == DISCORD_COMPONENT:
        member = _dict(payload.get("member"))
        presser = _dict(member.get("user")) or _dict(payload.get("user"))
        button = _button(_text(_dict(payload.get("data")).get("custom_id")))
        if button is None:
            return Delivery(discord_notice("This button is not one of popagent's."), event_id=event_id)
        press = Press(
            approval_id=button[1],
            decision=button[0],
            user=_id(presser.get("id")),
            conversation=_id(payload.get("channel_id")),
            message_id=_id(_dict(payload.get("message")).get("id")),
        )
        return Delivery(Answer(), event_id=event_id, press=press)
    if kind != DISCORD_COMMAND:
        return Delivery(
            Answer(status=400, body=orjson.dumps({"error": "unsupported interaction type"})), event_id=event_id
        )
    member = payload.get("member") if isinstance(payload.get("member"), dict) else {}
    assert isinstance(member, dict)
    user_obj = member.get("user") if isinstance(member.get("user"), dict) else payload.get("user")
    user = _id(user_obj.get("id")) if isinstance(user_obj, dict) else ""
    if isinstance(user_obj, dict) and user_obj.get("bot") is True:
        return Delivery(_discord_echo(""), event_id=event_id, from_bot=True)
    data = payload.get("data") if isinstance(payload.get("data"), dict) else {}
    assert isinstance(data, dict)
    # The command's text: its first string option (`/ask prompt:...`).
    text = ""
    for option in data.get("options") or []:
        if isinstance(option, dict) and isinstance(option.get("value"), str):
            text = option["value"]
            break
    channel = _id(payload.get("channel_id"))
    return Delivery(
        _discord_echo(text),
        message=Message(event_id, channel, "", user, text) if text else None,
        event_id=event_id,
    )


def _discord_echo(text: str) -> Answer:
    quoted = ("> " + text.replace("\n", "\n> "))[:DISCORD_MAX_CHARS] if text else "(nothing to answer)"
    return Answer(body=orjson.dumps({"type": DISCORD_MESSAGE, "data": {"content": quoted}}))


def discord_notice(text: str) -> Answer:
    """A message only the presser sees (a refused press)."""
    return Answer(body=orjson.dumps({"type": DISCORD_MESSAGE, "data": {"content": text, "flags": DISCORD_EPHEMERAL}}))


def discord_card_update(text: str) -> Answer:
    """The pressed card's new content, its buttons gone."""
    return Answer(body=orjson.dumps({"type": DISCORD_UPDATE_MESSAGE, "data": {"content": text, "components": []}}))


@dataclass(frozen=True)
class MatrixInvite:
    room: str
    inviter: str


def _matrix_text(content: dict[str, Any]) -> str:
    text = _text(content.get("body"))
    relation = _dict(content.get("m.relates_to"))
    if relation.get("m.in_reply_to") and not relation.get("is_falling_back"):
        # A reply's fallback quotes what it answers in lines starting "> ", then a blank line.
        lines = text.split("\n")
        while lines and lines[0].startswith(">"):
            lines.pop(0)
        text = "\n".join(lines).strip()
    return text


def matrix_deliveries(sync: dict[str, Any], bot_user_id: str) -> tuple[list[Delivery], list[MatrixInvite]]:
    """What one /sync answer holds for the bot: messages and reactions in its joined rooms, in order,
    and the rooms it is invited to (with who invited it)."""
    deliveries: list[Delivery] = []
    invites: list[MatrixInvite] = []
    rooms = _dict(sync.get("rooms"))
    for room, joined in _dict(rooms.get("join")).items():
        for event in _dict(_dict(joined).get("timeline")).get("events") or []:
            delivery = _matrix_event(str(room), _dict(event), bot_user_id)
            if delivery is not None:
                deliveries.append(delivery)
    for room, invited in _dict(rooms.get("invite")).items():
        for event in _dict(_dict(invited).get("invite_state")).get("events") or []:
            event = _dict(event)
            content = _dict(event.get("content"))
            if (
                event.get("type") == "m.room.member"
                and event.get("state_key") == bot_user_id
                and content.get("membership") == "invite"
            ):
                invites.append(MatrixInvite(str(room), _text(event.get("sender"))))
    return deliveries, invites


def _matrix_event(room: str, event: dict[str, Any], bot_user_id: str) -> Delivery | None:
    event_id = _text(event.get("event_id"))
    sender = _text(event.get("sender"))
    if not event_id or not sender:
        return None
    if sender == bot_user_id:
        return Delivery(Answer(), event_id=event_id, from_bot=True)
    content = _dict(event.get("content"))
    relation = _dict(content.get("m.relates_to"))
    kind = event.get("type")
    if kind == "m.reaction" and relation.get("rel_type") == "m.annotation":
        decision = _MATRIX_DECISIONS.get(_text(relation.get("key")).replace("\ufe0f", ""))
        if decision is None:
            return Delivery(Answer(), event_id=event_id)
        press = Press(
            approval_id="",  # the card is found by the event the reaction annotates
            decision=decision,
            user=sender,
            conversation=room,
            message_id=_text(relation.get("event_id")),
        )
        return Delivery(Answer(), event_id=event_id, press=press)
    if kind != "m.room.message" or content.get("msgtype") not in ("m.text", "m.emote"):
        return Delivery(Answer(), event_id=event_id)
    if relation.get("rel_type") == "m.replace":
        return Delivery(Answer(), event_id=event_id)  # an edit of a message already taken in
    thread = _text(relation.get("event_id")) if relation.get("rel_type") == "m.thread" else event_id
    text = _matrix_text(content)
    if not text:
        return Delivery(Answer(), event_id=event_id)
    return Delivery(
        Answer(), message=Message(event_id, room, thread, sender, text, reply_thread=thread), event_id=event_id
    )
