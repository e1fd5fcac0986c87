"""The turn log: every batch a chat turn streams, in order, on NATS JetStream (docs/turns.md).

One subject per turn (`popagent_turn_log.<turn id>`) in one stream with bounded retention. The
runner that runs the turn hands each batch to the turn's writer as it leaves (the live stream
waits for nothing, unless the turn's unstored batches pass MAX_BACKLOG_BYTES while the stream
answers), and the writer stores them in order, each acknowledged by the stream before
the next, with `Nats-Expected-Last-Subject-Sequence` naming the message before it (batches that
waited together go as one message). A batch the
stream did not store (a NATS server of a cluster lost, the stream's leader being elected again:
a core publish would be dropped then, silently) is sent again once the stream answers; the
expected sequence makes that safe, since the stream refuses a message that would land twice or
after a gap, and the writer then reads the subject's last message to know where it stands. When
the turn has ended its end marker (a message with the `Popagent-Turn-End` header naming the
turn's status) goes the same way. A follower replays the subject from its first message through
an ordered consumer and then reads on live until the end marker, so any agent-runner can serve
it, whichever one runs the turn.

What is logged is what the UI stream shows (the same redaction as the live stream, no request
bodies and no model requests), and it goes away with the stream's retention.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from nats.aio.client import Client as NatsClient
from nats.errors import Error as NatsError
from nats.errors import MaxPayloadError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import DeliverPolicy, DiscardPolicy, StorageType, StreamConfig
from nats.js.errors import APIError, NotFoundError

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_core import bus, subjects
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
EXPECTED_LAST_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
WRONG_LAST_SEQUENCE = 10071  # JetStream's error code: the subject's last message is not the one expected
# A turn's batches not yet stored are kept up to this size; past it (a long NATS outage) newer
# ones are dropped from the log (the live stream and the stored answer do not depend on it).
MAX_PENDING_BYTES = 8 * 1024 * 1024
# While the stream answers, a turn's `append` waits once more than this of it is not stored yet,
# as the core publish before the writer waited for NATS's socket: a turn that outruns JetStream (a
# fast model, slow acknowledgements on a busy machine) holds about one batch, not whole answers
# (ten 2 MB answers cost ~15 MB more without it). Chat-sized batches never reach it, so the live
# stream still waits for no acknowledgement; while the stream does not answer nothing waits (the
# pending cap above applies).
MAX_BACKLOG_BYTES = 64 * 1024
RETRY_MAX_S = 2.0
# How long a turn's end waits for its batches to be stored: past a cluster's leader election,
# short of holding a session for a whole NATS outage.
SETTLE_S = 10.0


@dataclass
class _Writer:
    """One turn's messages on their way into the stream, oldest first."""

    subject: str
    pending: collections.deque[tuple[bytes, dict[str, str] | None]] = field(
        default_factory=collections.deque[tuple[bytes, dict[str, str] | None]]
    )
    pending_bytes: int = 0
    # The stream sequence of the subject's last stored message (0: none yet, as far as we know).
    last_seq: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    dropped: int = 0
    # Set at each store and each failed one: what `append` waits on while the backlog is too large.
    progressed: asyncio.Event = field(default_factory=asyncio.Event)
    # The last store failed (the stream does not answer): appends do not wait for the writer.
    failing: bool = False
    released: bool = False


def subject(turn_id: str) -> str:
    return f"{SUBJECT_PREFIX}.{turn_id}"


class TurnLog:
    def __init__(self, nats: NatsClient) -> None:
        self.nats = nats
        self.js = nats.jetstream(timeout=ACK_TIMEOUT_S)
        # One warning per outage, not one per batch.
        self._failing = False
        self._writers: dict[str, _Writer] = {}

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
        await bus.define_stream(self.js, config)

    async def append(self, turn_id: str, batch: pb.TurnEventBatch) -> None:
        """The batch, after everything appended before it: handed to the turn's writer, stored
        once the stream answers (a NATS outage longer than the pending cap loses it from the log
        only: the live stream and the stored answer do not depend on the log)."""
        for message in _messages(batch):
            self._enqueue(turn_id, message, None)
        writer = self._writers.get(turn_id)
        while writer is not None and writer.pending_bytes > MAX_BACKLOG_BYTES and not writer.failing:
            if writer.released:
                return
            writer.progressed.clear()
            await writer.progressed.wait()

    async def settle(self, turn_id: str, within_s: float = SETTLE_S) -> bool:
        """Until every batch appended so far is stored (True), or `within_s` passed (False)."""
        writer = self._writers.get(turn_id)
        if writer is None:
            return True
        try:
            await asyncio.wait_for(writer.idle.wait(), within_s)
        except TimeoutError:
            return False
        return True

    async def end(self, turn_id: str, status: str, within_s: float = SETTLE_S) -> None:
        """The end marker, after every batch; the turn's writer goes once it is stored (or
        `within_s` passed: followers also stop once the record says the turn ended)."""
        self._enqueue(turn_id, b"", {END_HEADER: status})
        if not await self.settle(turn_id, within_s):
            self._failed("turn log end marker not stored", turn_id, NatsTimeoutError())
        await self.release(turn_id)

    async def release(self, turn_id: str) -> None:
        """Stop the turn's writer, stored or not (its turn was handed to another runner, or ended)."""
        writer = self._writers.pop(turn_id, None)
        if writer is not None:
            writer.released = True
            writer.progressed.set()
        if writer is not None and writer.task is not None:
            writer.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer.task

    async def aclose(self) -> None:
        for turn_id in list(self._writers):
            await self.release(turn_id)

    def _enqueue(self, turn_id: str, message: bytes, headers: dict[str, str] | None) -> None:
        writer = self._writers.get(turn_id)
        if writer is None:
            writer = self._writers[turn_id] = _Writer(subject(turn_id))
            writer.task = asyncio.create_task(self._write(writer), name=f"turn-log-{turn_id}")
        if headers is None and writer.pending_bytes + len(message) > MAX_PENDING_BYTES:
            writer.dropped += 1
            self._failed("turn log append dropped: too much pending", turn_id, NatsTimeoutError())
            return
        writer.pending.append((message, headers))
        writer.pending_bytes += len(message)
        writer.idle.clear()
        writer.wake.set()

    async def _write(self, writer: _Writer) -> None:
        delay = 0.05
        while True:
            if not writer.pending:
                writer.idle.set()
                writer.wake.clear()
                await writer.wake.wait()
                continue
            message, headers, count = _next_message(writer.pending)
            try:
                await self._store(writer, message, headers, count)
            except MaxPayloadError as exc:
                # One event larger than the server takes in a message (a huge tool argument): it can
                # never be stored, and retrying it would hold every later batch of the turn, its end
                # marker included, in memory until the turn's end gave up on them.
                writer.dropped += count
                self._stored(writer, count, len(message))
                logger.warning(
                    "turn log message dropped: larger than the NATS server takes",
                    extra={"turn_id": writer.subject, "bytes": len(message), "error": type(exc).__name__},
                )
                continue
            except Exception as exc:
                # A refused sequence is no failure: another runner (a takeover) wrote since.
                if not (isinstance(exc, APIError) and exc.err_code == WRONG_LAST_SEQUENCE):
                    self._failed("turn log append failed", writer.subject, exc)
                    writer.failing = True
                    writer.progressed.set()
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX_S)
                try:
                    if await self._stored_last(writer, message, headers):
                        self._stored(writer, count, len(message))
                except Exception as exc:
                    self._failed("turn log position unknown", writer.subject, exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX_S)
                continue
            delay = 0.05
            self._failing = False
            writer.failing = False

    async def _store(self, writer: _Writer, message: bytes, headers: dict[str, str] | None, count: int) -> None:
        ack = await self.js.publish(
            writer.subject,
            message,
            headers={**(headers or {}), EXPECTED_LAST_SEQUENCE: str(writer.last_seq)},
            timeout=ACK_TIMEOUT_S,
        )
        writer.last_seq = ack.seq
        self._stored(writer, count, len(message))

    @staticmethod
    def _stored(writer: _Writer, count: int, size: int) -> None:
        for _ in range(count):
            writer.pending.popleft()
        writer.pending_bytes -= size
        writer.progressed.set()

    async def _stored_last(self, writer: _Writer, message: bytes, headers: dict[str, str] | None) -> bool:
        """After a failed store: where the subject stands (its last message's sequence), and
        whether that last message is this one (stored, only its acknowledgement lost)."""
        try:
            last = await self.js.get_last_msg(STREAM, writer.subject)
        except NotFoundError:
            writer.last_seq = 0
            return False
        writer.last_seq = last.seq or 0
        if (last.data or b"") != message:
            return False
        return headers is None or all(last.headers and last.headers.get(k) == v for k, v in headers.items())

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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_S
        delay = 0.1
        while True:
            try:
                subscription = await self.js.subscribe(
                    subject(turn_id), stream=STREAM, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
                )
                break
            except NatsError as exc:
                # A NATS server of a cluster lost: the stream answers again once its leader is
                # elected, seconds later; a follower waits for that rather than failing.
                if loop.time() + delay > deadline:
                    raise Unavailable(
                        f"the turn log is unreachable ({type(exc).__name__}); follow the turn again later"
                    ) from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
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


def _next_message(
    pending: collections.deque[tuple[bytes, dict[str, str] | None]],
) -> tuple[bytes, dict[str, str] | None, int]:
    """The next message to store and how many pending entries it holds: batches waiting together
    go as one message (up to MAX_MESSAGE_BYTES). Serialized `TurnEventBatch`es concatenated parse
    as one batch with their events in order, and a follower numbers chunks by event, not by
    batch; one acknowledged publish per batch cost a busy runner more than the stream itself."""
    first, headers = pending[0]
    if headers is not None:
        return first, headers, 1
    parts = [first]
    size = len(first)
    for message, more_headers in itertools.islice(pending, 1, None):
        if more_headers is not None or size + len(message) > MAX_MESSAGE_BYTES:
            break
        parts.append(message)
        size += len(message)
    return (first if len(parts) == 1 else b"".join(parts)), None, len(parts)


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
