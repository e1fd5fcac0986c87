"""Channels in agent-runner (docs/channels.md): a platform's delivery checked, deduplicated and mapped
to its thread's session, the turn started there as a chat turn (the session's double-texting policy),
and the reply relayed to the platform as it streams.

The webhook answers as soon as the delivery is taken in (platforms retry a slow answer); the turn runs
on in this process, its batches going to the turn log, and the reply is relayed from that log under a
leased relay record, so if this runner stops another takes the relay over and finishes the reply (the
turn itself, like any chat turn, is taken over too: turns.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import orjson

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_agent_runner.approvals.store import Approval, ApprovalStore
from popagent_agent_runner.channels.credentials import Credentials
from popagent_agent_runner.channels.inbound import (
    Answer,
    Decision,
    Delivery,
    Message,
    Press,
    StopPress,
    discord_card_update,
    discord_notice,
    matrix_deliveries,
    parse,
    verify,
)
from popagent_agent_runner.channels.outbound import (
    MatrixPoster,
    Poster,
    SlackPoster,
    card_markdown,
    poster_for,
    split_rendered,
)
from popagent_agent_runner.channels.relay import EDIT_INTERVAL_S, ReplyRelay
from popagent_agent_runner.channels.store import ApprovalCard, ChannelStore, ConnectionRecord, RelayRecord
from popagent_agent_runner.turn.chat_turns import AlreadyRunning, ChatTurns, LiveTurn, Queued, QueuedTurnDropped
from popagent_agent_runner.turn.runner import TurnInput
from popagent_agent_runner.turn.ui_message import UserMessage
from popagent_core.errors import (
    AlreadyExists,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PopagentError,
)

logger = logging.getLogger(__name__)

STOP_COMMANDS = frozenset({"stop", "/stop"})
# Answers to the thread's newest open approval card, typed instead of pressed (where buttons are not shown).
APPROVAL_WORDS: dict[str, Decision] = {
    "approve": "once",
    "/approve": "once",
    "deny": "deny",
    "/deny": "deny",
    "allow for this session": "session",
    "/allow": "session",
}
MAX_PROMPT_CHARS = 32000
MAX_CARD_ARGUMENTS_CHARS = 600
# How often a runner renews its relays' leases and looks for relays whose runner died.
RELAY_CHECK_S = 1.0
TAKEOVER_BATCH = 20
# A follower of a turn whose runner's lease passed waits this long for another runner to take it over
# (runners look for lost turns every second), polling this often.
TAKEOVER_WAIT_S = 2.5
TAKEOVER_POLL_S = 0.1
FORGET_INTERVAL_S = 3600.0

SessionCreator = Callable[[str, str, str], Awaitable[None]]
PosterFactory = Callable[[str, str, str], Poster]


@dataclass(frozen=True)
class PostResult:
    message_ids: list[str]


@dataclass(frozen=True)
class ReplyPlace:
    """Where a turn's reply and approval cards go."""

    connection: ConnectionRecord
    poster: Poster
    conversation: str
    reply_thread: str
    session_id: str
    # Approval ids of the calls whose cards are open, by tool call id.
    asked: dict[str, str] = field(default_factory=dict[str, str])


def outcome_text(approval: Approval) -> str:
    who = approval.answered_by or "popagent"
    if approval.state == "approved" and approval.scope == "session":
        return f"✅ **{approval.tool_name}** allowed for this session by {who}"
    if approval.state == "approved":
        return f"✅ **{approval.tool_name}** approved by {who}"
    if approval.state == "denied":
        return f"❌ **{approval.tool_name}** denied by {who}"
    if approval.state == "expired":
        return f"⌛ **{approval.tool_name}** was not answered in time: denied"
    return f"**{approval.tool_name}**: {approval.state}"


def card_text(approval: Approval, platform: str = "") -> str:
    arguments = orjson.dumps(approval.arguments).decode()
    if len(arguments) > MAX_CARD_ARGUMENTS_CHARS:
        arguments = arguments[:MAX_CARD_ARGUMENTS_CHARS] + "…"
    arguments = arguments.replace("`", "'")
    return f"✋ **{approval.tool_name}** waits for approval. {approval.reason}\n\n`{arguments}`\n\n" + (
        "React ✅ to approve, ❌ to deny or 🔁 to allow for this session (or reply approve, deny, "
        "allow for this session in the thread)."
        if platform == "matrix"
        else "Approve, Deny or Allow for this session (or reply approve, deny, allow for this session)."
    )


class ChannelHub:
    def __init__(
        self,
        store: ChannelStore,
        turns: ChatTurns,
        create_session: SessionCreator,
        approvals: ApprovalStore,
        *,
        poster_factory: PosterFactory = poster_for,
        edit_interval_s: float = EDIT_INTERVAL_S,
        relay_check_s: float = RELAY_CHECK_S,
        edit_window_s: float = 0.0,
    ) -> None:
        self.store = store
        self.turns = turns
        self.create_session = create_session
        self.approvals = approvals
        self.poster_factory = poster_factory
        self.edit_interval_s = edit_interval_s
        self.relay_check_s = relay_check_s
        self.edit_window_s = edit_window_s
        self._background: set[asyncio.Task[None]] = set()
        # Turn ids whose replies this runner relays (their leases are renewed).
        self._relaying: set[str] = set()
        # Matrix connections whose /sync loop runs here.
        self._syncing: set[str] = set()

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
        if connection.platform == "matrix":
            raise FailedPrecondition(
                "a Matrix connection reads its rooms through /sync; it takes no webhook deliveries"
            )
        credentials = await self._credentials(connection)
        verify(connection.platform, credentials.inbound_key, {k.lower(): v for k, v in headers.items()}, body)
        return await self._take_in(connection, credentials, parse(connection.platform, body, connection.bot_user_id))

    async def _take_in(self, connection: ConnectionRecord, credentials: Credentials, delivery: Delivery) -> Answer:
        """A checked delivery acted on once: a press answered, a message's turn started in the background."""
        if delivery.event_id and not await self.store.first_delivery(connection.id, delivery.event_id):
            return delivery.answer  # a retry or a replay: taken in once already
        if delivery.press is not None:
            return await self._press(connection, credentials, delivery.press, delivery.answer)
        if delivery.stop is not None:
            self._spawn(self._stop_pressed(connection, credentials, delivery.stop), "channel-stop")
            return delivery.answer
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
        self._spawn(self._converse(connection, credentials, message), "channel-turn")
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
            word = APPROVAL_WORDS.get(" ".join(text.lower().split()))
            if word is not None and (cards := await self.store.open_cards(session_id)):
                await self._answer_by_word(connection, poster, message, cards[0], word)
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
        if isinstance(started, AlreadyRunning):
            # Its message id is new for each event (repeated deliveries are dropped before): its
            # turn runs, and that turn's relay posts the reply.
            return
        if isinstance(started, Queued):
            try:
                live = await self.turns.when_its_turn(turn)
            except QueuedTurnDropped:
                return
        else:
            live = started
        relay = RelayRecord(
            live.turn_id, connection.id, message.conversation, message.thread, message.reply_thread, session_id, ""
        )
        await self.store.add_relay(relay, self.turns.records.runner_id, self.turns.records.lease_s)
        # The turn's batches go to its log from here; the reply follows the log like any runner's would.
        self._spawn(self._drive(live), "channel-turn-log")
        await self.store.record(
            connection.id,
            "in",
            f"turn {live.turn_id} started",
            conversation=message.conversation,
            thread=message.thread,
            platform_user=message.user,
            session_id=session_id,
            turn_id=live.turn_id,
        )
        await self._follow(relay, connection, poster)

    async def _drive(self, live: LiveTurn) -> None:
        """The turn's batches to its log, as an attached chat caller does."""
        attached = True
        try:
            async for batch in live.output.events.batches():
                await self.turns.log.append(live.turn_id, batch)
            live.logged.set()
            attached = False
            await live.concluded.wait()
        finally:
            if attached:
                self.turns.detach(live)

    async def _follow(self, relay_record: RelayRecord, connection: ConnectionRecord, poster: Poster) -> None:
        """The reply relayed from the turn's log (from its first batch), its approval requests to cards,
        and the final edit; then the relay is marked finished."""
        turn_id, session_id = relay_record.turn_id, relay_record.session_id
        self._relaying.add(turn_id)

        async def error(text: str) -> None:
            await self.store.record(
                connection.id,
                "error",
                text,
                conversation=relay_record.conversation,
                thread=relay_record.thread,
                session_id=session_id,
                turn_id=turn_id,
            )

        async def posted(message_id: str) -> None:
            await self.store.relay_posted(turn_id, message_id)

        relay = ReplyRelay(
            poster,
            relay_record.conversation,
            relay_record.reply_thread,
            on_error=error,
            edit_interval_s=self.edit_interval_s,
            message_id=relay_record.message_id,
            on_posted=posted,
            edit_window_s=self.edit_window_s,
            stop=turn_id if connection.platform == "slack" else "",
        )
        place = ReplyPlace(connection, poster, relay_record.conversation, relay_record.reply_thread, session_id)
        records = self.turns.records

        async def running() -> bool:
            deadline = asyncio.get_running_loop().time() + TAKEOVER_WAIT_S
            while True:
                current = await records.get(session_id, turn_id)
                if current is None or current.status not in ("running", "queued"):
                    return False
                if current.leased:
                    return True
                # Its runner's lease passed: another runner takes the turn over in a moment, or ends it.
                if asyncio.get_running_loop().time() >= deadline:
                    return False
                await asyncio.sleep(TAKEOVER_POLL_S)

        ended: list[str] = []
        read = 0
        try:
            async for batch in self.turns.log.follow(
                turn_id, running=running, idle_check_s=records.lease_s / 3, on_end=ended.append
            ):
                read += 1
                relay.read(batch)
                await self._cards_of(batch, place)
            if not read and relay_record.message_id:
                # The log no longer holds the turn (past its retention): what was posted stays as it is.
                await self.store.finish_relay(turn_id, records.runner_id)
                return
            if not ended:
                current = await records.get(session_id, turn_id)
                if current is None or current.status in ("running", "interrupted"):
                    relay.failure = relay.failure or "interrupted: the agent-runner running this turn stopped"
            sent = await relay.finish()
        finally:
            self._relaying.discard(turn_id)
        if not await self.store.finish_relay(turn_id, records.runner_id):
            logger.warning("a channel relay was taken over while it finished", extra={"turn_id": turn_id})
        await self.store.record(
            connection.id,
            "out",
            relay.answer or relay.failure,
            conversation=relay_record.conversation,
            thread=relay_record.thread,
            session_id=session_id,
            turn_id=turn_id,
        )
        logger.info("channel reply posted", extra={"connection": connection.id, "messages": len(sent)})

    async def _adopt(self, relay_record: RelayRecord) -> None:
        """A relay whose runner died, gone on with here."""
        try:
            connection = await self.store.get(relay_record.connection_id)
            credentials = await self._credentials(connection)
        except PopagentError as exc:
            logger.warning(
                "a channel relay could not be taken over", extra={"turn_id": relay_record.turn_id, "error": str(exc)}
            )
            return
        poster = self.poster_factory(connection.platform, credentials.bot_token, connection.api_base_url)
        try:
            await self._follow(relay_record, connection, poster)
        except PopagentError as exc:
            await self.store.record(
                connection.id, "error", f"a reply could not be relayed: {exc}", turn_id=relay_record.turn_id
            )
        except Exception:
            logger.exception("channel relay failed", extra={"connection": connection.id})
        finally:
            await poster.aclose()

    async def keep_relaying(self) -> None:
        """Until cancelled: the leases of the relays this runner follows renewed, relays whose runner died
        taken over, and old event ids and finished relays forgotten now and then."""
        records = self.turns.records
        loop = asyncio.get_running_loop()
        forgotten_at = 0.0
        while True:
            try:
                if self._relaying:
                    await self.store.renew_relays(records.runner_id, records.lease_s, list(self._relaying))
                for lost in await self.store.take_over_relays(records.runner_id, records.lease_s, TAKEOVER_BATCH):
                    logger.info("a channel relay is taken over", extra={"turn_id": lost.turn_id})
                    self._spawn(self._adopt(lost), "channel-relay")
                if loop.time() - forgotten_at > FORGET_INTERVAL_S:
                    await self.store.forget_old_events()
                    await self.store.forget_old_relays()
                    forgotten_at = loop.time()
            except PopagentError as exc:
                logger.warning("channel relays not kept", extra={"error": str(exc)})
            await asyncio.sleep(self.relay_check_s)

    # Matrix ---------------------------------------------------------------------------------

    async def keep_syncing(self) -> None:
        """Until cancelled: each enabled Matrix connection's /sync loop run by one agent-runner, this one
        when no other holds it (a leased claim, taken over when its holder stops renewing it)."""
        records = self.turns.records
        while True:
            try:
                for connection in await self.store.list():
                    if connection.platform != "matrix" or not connection.enabled:
                        continue
                    if connection.id in self._syncing:
                        continue
                    since = await self.store.claim_sync(connection.id, records.runner_id, records.lease_s)
                    if since is not None:
                        self._syncing.add(connection.id)
                        self._spawn(self._sync(connection, since), "channel-matrix-sync")
            except PopagentError as exc:
                logger.warning("Matrix sync loops not kept", extra={"error": str(exc)})
            await asyncio.sleep(self.relay_check_s)

    async def _sync(self, connection: ConnectionRecord, since: str) -> None:
        """One connection's /sync long-poll while this runner holds it and the connection stays enabled:
        invites from allowed users accepted, each event taken in once, then the next sync resumes after it."""
        records = self.turns.records
        poster: MatrixPoster | None = None
        try:
            credentials = await self._credentials(connection)
            made = self.poster_factory(connection.platform, credentials.bot_token, connection.api_base_url)
            assert isinstance(made, MatrixPoster)
            poster = made
            while True:
                current = await self.store.get(connection.id)
                if not current.enabled or current.platform != "matrix":
                    return
                # A long-poll within the lease: the loop renews the claim after each answer.
                answer = await poster.sync(since, records.lease_s / 3)
                deliveries, invites = matrix_deliveries(answer, current.bot_user_id)
                for invite in invites:
                    await self._invited(current, poster, invite.room, invite.inviter)
                if since:  # the first sync only says where "now" is
                    for delivery in deliveries:
                        if not delivery.from_bot:
                            await self._take_in(current, credentials, delivery)
                since = str(answer.get("next_batch") or since)
                if not await self.store.synced(connection.id, records.runner_id, since, records.lease_s):
                    return  # another runner holds the loop now
        except NotFound:
            return  # the connection (or its credentials) was deleted meanwhile: its loop ends with it
        except PopagentError as exc:
            with contextlib.suppress(PopagentError):  # the history row needs its connection
                await self.store.record(connection.id, "error", f"the Matrix sync stopped, it starts again: {exc}")
            await asyncio.sleep(self.relay_check_s)
        except Exception:
            logger.exception("Matrix sync failed", extra={"connection": connection.id})
        finally:
            self._syncing.discard(connection.id)
            if poster is not None:
                await poster.aclose()
            with contextlib.suppress(PopagentError):
                await self.store.release_sync(connection.id, records.runner_id)

    async def _invited(self, connection: ConnectionRecord, poster: MatrixPoster, room: str, inviter: str) -> None:
        if inviter not in connection.allowed_users:
            await self.store.record(
                connection.id,
                "error",
                f"user {inviter!r} invited the bot to a room but is not among the allowed users; not joined",
                conversation=room,
                platform_user=inviter,
            )
            return
        await poster.join(room)
        await self.store.record(connection.id, "in", "joined the room", conversation=room, platform_user=inviter)

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _stop(self, connection: ConnectionRecord, poster: Poster, message: Message, session_id: str) -> None:
        running = await self.turns.records.running(session_id)
        if running is None:
            text = "Nothing is running in this thread."
        else:
            await self.turns.cancel(session_id, running.id)
            text = "Stopped."
        await poster.post(message.conversation, message.reply_thread, split_rendered(poster.platform, text)[0])

    async def _stop_pressed(self, connection: ConnectionRecord, credentials: Credentials, stop: StopPress) -> None:
        """Slack's Stop button: the turn cancelled when the presser started it or is an approver, and it
        is a turn of this connection; anyone else is told so privately and nothing changes."""
        poster = self.poster_factory(connection.platform, credentials.bot_token, connection.api_base_url)
        try:
            try:
                session_id = await self.store.session_of_turn(connection.id, stop.turn_id)
            except NotFound:
                refusal = "This turn is not one of this connection's."
            else:
                starter = await self.store.starter_of_turn(connection.id, stop.turn_id)
                if stop.user and (stop.user == starter or stop.user in connection.approvers):
                    await self.turns.cancel(session_id, stop.turn_id)
                    await self.store.record(
                        connection.id,
                        "in",
                        f"turn {stop.turn_id} stopped",
                        conversation=stop.conversation,
                        platform_user=stop.user,
                        session_id=session_id,
                        turn_id=stop.turn_id,
                    )
                    return
                refusal = "Only the person who asked, or an approver, can stop this reply."
            await self.store.record(
                connection.id,
                "error",
                f"user {stop.user!r} pressed Stop on turn {stop.turn_id}: {refusal}",
                conversation=stop.conversation,
                platform_user=stop.user,
            )
            if isinstance(poster, SlackPoster):
                await poster.tell(stop.conversation, stop.user, refusal)
        except PopagentError as exc:
            await self.store.record(connection.id, "error", f"a Stop press could not be answered: {exc}")
        finally:
            await poster.aclose()

    # Approvals ------------------------------------------------------------------------------

    async def _cards_of(self, batch: pb.TurnEventBatch, place: ReplyPlace) -> None:
        for event in batch.events:
            kind = event.WhichOneof("event")
            try:
                if kind == "approval_request":
                    place.asked[event.approval_request.tool_call_id] = event.approval_request.approval_id
                    await self._post_card(place, event.approval_request.approval_id)
                elif kind == "tool_output" and event.tool_output.tool_call_id in place.asked:
                    await self._settle(place, place.asked.pop(event.tool_output.tool_call_id))
                elif kind == "tool_denied":
                    place.asked.pop(event.tool_denied.tool_call_id, None)
                    await self._settle(place, event.tool_denied.approval_id)
            except PopagentError as exc:
                await self.store.record(
                    place.connection.id,
                    "error",
                    f"an approval card could not be posted or edited: {exc}",
                    conversation=place.conversation,
                    thread=place.reply_thread,
                    session_id=place.session_id,
                )

    async def post_approval_card(self, connection_id: str, conversation: str, thread: str, approval_id: str) -> str:
        """A needs-you notice: the card of a pending approval (a task's turn waits for it) posted to a
        conversation of the connection; its presses are taken as a channel turn's card's are. The card's
        message id, or "" when the approval has a card already or no longer waits."""
        connection = await self.store.get(connection_id)
        if not connection.enabled:
            raise FailedPrecondition(f"channel connection {connection_id!r} is disabled")
        if not conversation:
            raise InvalidArgument("conversation is required")
        approval = await self.approvals.get(approval_id)
        if approval.state != "pending":
            return ""
        credentials = await self._credentials(connection)
        poster = self.poster_factory(connection.platform, credentials.bot_token, connection.api_base_url)
        try:
            return await self._post_card(
                ReplyPlace(connection, poster, conversation, thread, approval.session_id), approval_id
            )
        finally:
            await poster.aclose()

    async def _post_card(self, place: ReplyPlace, approval_id: str) -> str:
        approval = await self.approvals.get(approval_id)
        claimed = await self.store.claim_card(
            approval_id,
            place.connection.id,
            place.conversation,
            place.reply_thread,
            place.session_id,
            approval.tool_name,
        )
        if not claimed:
            return ""  # posted before (this runner took the turn over, or the notice came again)
        text = card_markdown(place.poster.platform, card_text(approval, place.poster.platform))
        message_id = await place.poster.post_card(place.conversation, place.reply_thread, text, approval_id)
        await self.store.card_posted(approval_id, message_id)
        await self.store.record(
            place.connection.id,
            "out",
            f"approval card for {approval.tool_name} ({approval_id})",
            conversation=place.conversation,
            thread=place.reply_thread,
            session_id=place.session_id,
        )
        return message_id

    def approval_answered(self, approval: Approval) -> None:
        """An approval answered in popagent (the UI, the API): its card, if it has one still open, is
        edited on the platform to the decision and loses its buttons, in the background."""
        self._spawn(self._settle_answered(approval), "channel-card-settle")

    async def _settle_answered(self, approval: Approval) -> None:
        try:
            card = await self.store.settle_card(approval.id, outcome_text(approval))
            if card is None or not card.message_id:
                return  # no card, or settled already (a press, or the turn moving on)
            connection = await self.store.get(card.connection_id)
            credentials = await self._credentials(connection)
        except PopagentError as exc:
            logger.warning("an answered approval's card was not settled", extra={"error": str(exc)})
            return
        poster = self.poster_factory(connection.platform, credentials.bot_token, connection.api_base_url)
        try:
            await poster.settle_card(card.conversation, card.message_id, card_markdown(poster.platform, card.outcome))
        except PopagentError as exc:
            await self.store.record(
                connection.id,
                "error",
                f"an approval card could not be edited to its answer: {exc}",
                conversation=card.conversation,
                thread=card.thread,
                session_id=card.session_id,
            )
        finally:
            await poster.aclose()

    async def _settle(self, place: ReplyPlace, approval_id: str) -> None:
        """A card whose approval was answered elsewhere (popagent's UI, the API, its expiry) shows it."""
        approval = await self.approvals.get(approval_id)
        card = await self.store.settle_card(approval_id, outcome_text(approval))
        if card is not None and card.message_id:
            await place.poster.settle_card(
                card.conversation, card.message_id, card_markdown(place.poster.platform, card.outcome)
            )

    async def _decide(
        self, connection: ConnectionRecord, card: ApprovalCard, decision: Decision, user: str
    ) -> tuple[str | None, str]:
        """An approver's answer to the card's approval: (the card's outcome text, "") once taken, or
        (None, why not) for a press or word that changes nothing."""
        if user not in connection.approvers:
            await self.store.record(
                connection.id,
                "error",
                f"user {user!r} answered approval {card.approval_id} ({decision}) but is not among the "
                "approvers; nothing changed",
                conversation=card.conversation,
                thread=card.thread,
                platform_user=user,
                session_id=card.session_id,
            )
            return None, "Only this connection's approvers can answer approvals."
        try:
            approval = await self.approvals.answer(
                card.approval_id,
                approved=decision != "deny",
                scope=None if decision == "deny" else decision,
                answered_by=f"{connection.platform}:{user}",
                reason=f"answered in {connection.platform}",
            )
        except FailedPrecondition as exc:
            return None, str(exc)
        outcome = outcome_text(approval)
        await self.store.record(
            connection.id,
            "in",
            outcome,
            conversation=card.conversation,
            thread=card.thread,
            platform_user=user,
            session_id=card.session_id,
        )
        settled = await self.store.settle_card(card.approval_id, outcome)
        return (settled.outcome if settled is not None else outcome), ""

    async def _press(
        self, connection: ConnectionRecord, credentials: Credentials, press: Press, answer: Answer
    ) -> Answer:
        if press.approval_id:
            card = await self.store.card(connection.id, press.approval_id)
        else:
            card = await self.store.card_by_message(connection.id, press.message_id)
            if card is None:
                return answer  # a reaction to some other message
        poster = self.poster_factory(connection.platform, credentials.bot_token, connection.api_base_url)
        try:
            if card is None:
                await self.store.record(
                    connection.id,
                    "error",
                    f"a press named approval {press.approval_id!r}, which has no card of this connection",
                    conversation=press.conversation,
                    platform_user=press.user,
                )
                outcome, refusal = None, "This approval is not one of this connection's."
            else:
                outcome, refusal = await self._decide(connection, card, press.decision, press.user)
            if outcome is None:
                if connection.platform == "discord":
                    return discord_notice(refusal)
                await poster.refuse_press(press, refusal)
                return answer
            assert card is not None
            shown = card_markdown(poster.platform, outcome)
            if connection.platform == "discord":
                return discord_card_update(shown)
            await poster.took_press(press)
            await poster.settle_card(card.conversation, card.message_id or press.message_id, shown)
            return answer
        except PopagentError as exc:
            await self.store.record(
                connection.id,
                "error",
                f"a press could not be answered on the platform: {exc}",
                platform_user=press.user,
            )
            return answer
        finally:
            await poster.aclose()

    async def _answer_by_word(
        self, connection: ConnectionRecord, poster: Poster, message: Message, card: ApprovalCard, decision: Decision
    ) -> None:
        outcome, refusal = await self._decide(connection, card, decision, message.user)
        if outcome is None:
            await poster.post(message.conversation, message.reply_thread, split_rendered(poster.platform, refusal)[0])
            return
        if card.message_id:
            await poster.settle_card(card.conversation, card.message_id, card_markdown(poster.platform, outcome))

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
