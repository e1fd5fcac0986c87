"""The turn log: every batch a chat turn streams, in order, on NATS JetStream (docs/turns.md).

One subject per turn (`popagent_turn_log.<turn id>`) in one stream with bounded retention. The
runner that runs the turn appends each batch as it leaves (a core publish on its one connection:
NATS keeps a connection's messages in order, and the stream stores them as they come, so the
live stream pays no acknowledgement round trip per batch); when the turn has ended it appends an
end marker (a message with the `Popagent-Turn-End` header naming the turn's status) and waits for
the stream's acknowledgement, which also says everything before it was stored. A follower
replays the subject from its first message through an ordered consumer and then reads on live
until the end marker, so any agent-runner can serve it, whichever one runs the turn.

What is logged is what the UI stream shows (the same redaction as the live stream, no request
bodies and no model requests), and it goes away with the stream's retention.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from nats.aio.client import Client as NatsClient
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import DeliverPolicy, DiscardPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_core import subjects
from popagent_core.errors import Unavailable

logger = logging.getLogger(__name__)

STREAM = subjects.TURN_LOG_STREAM
SUBJECT_PREFIX = subjects.TURN_LOG_SUBJECT_PREFIX
END_HEADER = "Popagent-Turn-End"
# A turn can be followed for a day after it started; the log is not the history (the thread is).
MAX_AGE_S = 24 * 3600.0
# The stream's size cap: past it the oldest turns' logs go first.
MAX_BYTES = 1024**3
# Below NATS's default max_payload (1 MiB): a batch larger than this goes out as several messages.
MAX_MESSAGE_BYTES = 512 * 1024
ACK_TIMEOUT_S = 2.0


def subject(turn_id: str) -> str:
    return f"{SUBJECT_PREFIX}.{turn_id}"


class TurnLog:
    def __init__(self, nats: NatsClient) -> None:
        self.nats = nats
        self.js = nats.jetstream(timeout=ACK_TIMEOUT_S)
        # One warning per outage, not one per batch.
        self._failing = False

    async def ensure_stream(self, *, replicas: int = 1) -> None:
        """Create (or update) the log's stream, on `replicas` servers of a NATS cluster. Idempotent."""
        config = StreamConfig(
            name=STREAM,
            subjects=[f"{SUBJECT_PREFIX}.*"],
            max_age=MAX_AGE_S,
            max_bytes=MAX_BYTES,
            discard=DiscardPolicy.OLD,
            storage=StorageType.FILE,
            duplicate_window=0,
            num_replicas=replicas,
        )
        try:
            await self.js.stream_info(STREAM)
            await self.js.update_stream(config)
        except NotFoundError:
            await self.js.add_stream(config)

    async def append(self, turn_id: str, batch: pb.TurnEventBatch) -> None:
        """The batch, after everything appended before it; a NATS outage loses it from the log
        only (the live stream and the stored answer do not depend on the log)."""
        try:
            for message in _messages(batch):
                await self.nats.publish(subject(turn_id), message)
        except NatsError as exc:
            self._failed("turn log append failed", turn_id, exc)
        else:
            self._failing = False

    async def end(self, turn_id: str, status: str) -> None:
        """The end marker, acknowledged by the stream (so every batch before it is stored too)."""
        try:
            await self.js.publish(subject(turn_id), b"", headers={END_HEADER: status})
        except NatsError as exc:
            self._failed("turn log end marker not stored", turn_id, exc)

    async def follow(
        self,
        turn_id: str,
        *,
        running: Callable[[], Awaitable[bool]],
        idle_check_s: float,
        on_end: Callable[[str], None] | None = None,
    ) -> AsyncIterator[pb.TurnEventBatch]:
        """Every batch of the turn from its first, then live, until its end marker (whose status
        goes to `on_end`). After `idle_check_s` without a message `running()` is asked: once the
        turn no longer runs anywhere (ended without a marker, or its runner lost its lease) the
        iteration ends."""
        try:
            subscription = await self.js.subscribe(
                subject(turn_id), stream=STREAM, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
            )
        except NatsError as exc:
            raise Unavailable(
                f"the turn log is unreachable ({type(exc).__name__}); follow the turn again later"
            ) from exc
        try:
            while True:
                try:
                    message = await subscription.next_msg(timeout=idle_check_s)
                except NatsTimeoutError:
                    if await running():
                        continue
                    return
                if message.headers and END_HEADER in message.headers:
                    if on_end is not None:
                        on_end(message.headers[END_HEADER])
                    return
                yield pb.TurnEventBatch.FromString(message.data)
        finally:
            try:
                await subscription.unsubscribe()
            except NatsError:
                logger.debug("turn log subscription already closed", exc_info=True)

    def _failed(self, what: str, turn_id: str, exc: Exception) -> None:
        if not self._failing:
            logger.warning(what, extra={"turn_id": turn_id, "error": type(exc).__name__})
        self._failing = True


def _messages(batch: pb.TurnEventBatch) -> list[bytes]:
    """The batch as one message, or as several when it is too large for one."""
    data = batch.SerializeToString()
    if len(data) <= MAX_MESSAGE_BYTES:
        return [data]
    messages: list[bytes] = []
    part = pb.TurnEventBatch()
    for event in batch.events:
        if part.events and part.ByteSize() + event.ByteSize() > MAX_MESSAGE_BYTES:
            messages.append(part.SerializeToString())
            part = pb.TurnEventBatch()
        part.events.append(event)
    if part.events:
        messages.append(part.SerializeToString())
    return messages
