"""Channels in agent-runner (docs/channels.md): a platform's delivery checked, deduplicated and mapped
to its thread's session, the turn started there as a chat turn (the session's double-texting policy),
and the reply relayed to the platform as it streams.

The webhook answers as soon as the delivery is taken in (platforms retry a slow answer); the turn and
its reply run on in this process, and the turn, like any chat turn, goes on elsewhere if this runner
stops (its reply then ends with the turn's log, not here)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson

from popagent_agent_runner.channels.credentials import Credentials
from popagent_agent_runner.channels.inbound import Answer, Message, parse, verify
from popagent_agent_runner.channels.outbound import Poster, poster_for, split_rendered
from popagent_agent_runner.channels.relay import EDIT_INTERVAL_S, ReplyRelay
from popagent_agent_runner.channels.store import ChannelStore, ConnectionRecord
from popagent_agent_runner.turn.chat_turns import ChatTurns, LiveTurn, Queued, QueuedTurnDropped
from popagent_agent_runner.turn.runner import TurnInput
from popagent_agent_runner.turn.ui_message import UserMessage
from popagent_core.errors import AlreadyExists, Conflict, FailedPrecondition, InvalidArgument, PopagentError

logger = logging.getLogger(__name__)

STOP_COMMANDS = frozenset({"stop", "/stop"})
MAX_PROMPT_CHARS = 32000

SessionCreator = Callable[[str, str, str], Awaitable[None]]
PosterFactory = Callable[[str, str, str], Poster]


@dataclass(frozen=True)
class PostResult:
    message_ids: list[str]


class ChannelHub:
    def __init__(
        self,
        store: ChannelStore,
        turns: ChatTurns,
        create_session: SessionCreator,
        *,
        poster_factory: PosterFactory = poster_for,
        edit_interval_s: float = EDIT_INTERVAL_S,
    ) -> None:
        self.store = store
        self.turns = turns
        self.create_session = create_session
        self.poster_factory = poster_factory
        self.edit_interval_s = edit_interval_s
        self._background: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    async def _credentials(self, connection: ConnectionRecord) -> Credentials:
        return await self.store.credentials.resolve(connection.platform, connection.id)

    # Inbound --------------------------------------------------------------------------------

    async def event(self, connection_id: str, headers: dict[str, str], body: bytes) -> Answer:
        """One delivery to the connection's webhook: Unauthenticated (nothing read, nothing stored) unless
        the platform signed it; otherwise the platform's answer, the message acted on in the background."""
        connection = await self.store.get(connection_id)
        credentials = await self._credentials(connection)
        verify(connection.platform, credentials.inbound_key, {k.lower(): v for k, v in headers.items()}, body)
        delivery = parse(connection.platform, body, connection.bot_user_id)
        if delivery.event_id and not await self.store.first_delivery(connection.id, delivery.event_id):
            return delivery.answer  # a retry or a replay: taken in once already
        message = delivery.message
        if message is None or delivery.from_bot:
            return delivery.answer
        if not connection.enabled:
            await self.store.record(
                connection.id,
                "error",
                "a message arrived while the connection is disabled",
                conversation=message.conversation,
                thread=message.thread,
                platform_user=message.user,
            )
            return delivery.answer
        if message.user not in connection.allowed_users:
            await self.store.record(
                connection.id,
                "error",
                f"user {message.user!r} is not among the allowed users; the message was ignored",
                conversation=message.conversation,
                thread=message.thread,
                platform_user=message.user,
            )
            return delivery.answer
        task = asyncio.create_task(self._converse(connection, credentials, message), name="channel-turn")
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return delivery.answer

    async def _converse(self, connection: ConnectionRecord, credentials: Credentials, message: Message) -> None:
        poster = self.poster_factory(connection.platform, credentials.bot_token, connection.api_base_url)

        async def error(text: str) -> None:
            logger.warning("channel reply problem", extra={"connection": connection.id, "problem": text})
            await self.store.record(
                connection.id, "error", text, conversation=message.conversation, thread=message.thread
            )

        try:
            await self._take(connection, poster, message, error)
        except PopagentError as exc:
            await error(f"the message could not be answered: {exc}")
        except Exception:
            logger.exception("channel turn failed", extra={"connection": connection.id})
            await error("the message could not be answered: internal error")
        finally:
            await poster.aclose()

    async def _take(
        self, connection: ConnectionRecord, poster: Poster, message: Message, error: Callable[[str], Awaitable[None]]
    ) -> None:
        text = message.text.strip()[:MAX_PROMPT_CHARS]
        async with self.store.thread_locked(connection.id, message.conversation, message.thread):
            session_id, new = await self.store.session_for(connection.id, message.conversation, message.thread)
            if new:
                try:
                    await self.create_session(session_id, text[:80], connection.workspace_id)
                except AlreadyExists:
                    pass
            await self.store.record(
                connection.id,
                "in",
                text,
                conversation=message.conversation,
                thread=message.thread,
                platform_user=message.user,
                session_id=session_id,
            )
            if text.lower() in STOP_COMMANDS:
                await self._stop(connection, poster, message, session_id)
                return
            turn = TurnInput(
                session_id=session_id,
                message=UserMessage.parse(
                    orjson.dumps(
                        {
                            "id": f"channel-{uuid.uuid4().hex}",
                            "role": "user",
                            "parts": [{"type": "text", "text": text}],
                        }
                    ).decode()
                ),
                workspace_id=connection.workspace_id,
            )

            async def refuse(running_turn_id: str) -> None:
                raise Conflict(
                    f"a turn is already running in this thread (turn {running_turn_id}); send again when it ends"
                )

            try:
                started = await self.turns.start(turn, None, refuse)
            except Conflict as exc:
                await poster.post(
                    message.conversation, message.reply_thread, split_rendered(poster.platform, str(exc))[0]
                )
                await error(str(exc))
                return
        if isinstance(started, Queued):
            try:
                live = await self.turns.when_its_turn(turn)
            except QueuedTurnDropped:
                return
        else:
            live = started
        relay = ReplyRelay(
            poster, message.conversation, message.reply_thread, on_error=error, edit_interval_s=self.edit_interval_s
        )
        await self.store.record(
            connection.id,
            "in",
            f"turn {live.turn_id} started",
            conversation=message.conversation,
            thread=message.thread,
            session_id=session_id,
            turn_id=live.turn_id,
        )
        await self._relay(live, relay)
        posted = await relay.finish()
        await self.store.record(
            connection.id,
            "out",
            relay.answer or relay.failure,
            conversation=message.conversation,
            thread=message.thread,
            session_id=session_id,
            turn_id=live.turn_id,
        )
        logger.info("channel reply posted", extra={"connection": connection.id, "messages": len(posted)})

    async def _relay(self, live: LiveTurn, relay: ReplyRelay) -> None:
        """The turn's batches, each to its log (as an attached chat caller does) and to the relay."""
        attached = True
        try:
            async for batch in live.output.events.batches():
                await self.turns.log.append(live.turn_id, batch)
                relay.read(batch)
            live.logged.set()
            attached = False
            await live.concluded.wait()
        finally:
            if attached:
                self.turns.detach(live)

    async def _stop(self, connection: ConnectionRecord, poster: Poster, message: Message, session_id: str) -> None:
        running = await self.turns.records.running(session_id)
        if running is None:
            text = "Nothing is running in this thread."
        else:
            await self.turns.cancel(session_id, running.id)
            text = "Stopped."
        await poster.post(message.conversation, message.reply_thread, split_rendered(poster.platform, text)[0])

    # Routes ---------------------------------------------------------------------------------

    async def cancel(self, connection_id: str, turn_id: str) -> str:
        session_id = await self.store.session_of_turn(connection_id, turn_id)
        return await self.turns.cancel(session_id, turn_id)

    async def post(self, connection_id: str, conversation: str, thread: str, text: str) -> PostResult:
        """A message from popagent (a task's result, an API client's notice), split beyond the limit."""
        connection = await self.store.get(connection_id)
        if not connection.enabled:
            raise FailedPrecondition(f"channel connection {connection_id!r} is disabled")
        if not conversation or not text.strip():
            raise InvalidArgument("conversation and text are required")
        credentials = await self._credentials(connection)
        poster = self.poster_factory(connection.platform, credentials.bot_token, connection.api_base_url)
        try:
            ids = [await poster.post(conversation, thread, part) for part in split_rendered(poster.platform, text)]
        except PopagentError as exc:
            await self.store.record(
                connection.id, "error", f"a post failed: {exc}", conversation=conversation, thread=thread
            )
            raise
        finally:
            await poster.aclose()
        await self.store.record(connection.id, "out", text, conversation=conversation, thread=thread)
        return PostResult(ids)
