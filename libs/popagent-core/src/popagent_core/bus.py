"""NATS with JetStream: connection, stream bootstrap, durable consumers, transactional outbox.

Events another service must not miss are written to the owning schema's
`popagent_outbox` in the same transaction as the state change (`enqueue_event`), then
relayed to JetStream by `OutboxRelay` with `Nats-Msg-Id` = outbox id, so a re-sent
event (after a crash between publish and mark) is dropped by JetStream's duplicate
window and carries the same id for idempotent consumers beyond it. A NATS outage only
delays delivery: rows stay pending and the relay retries with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import nats
import orjson
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import NoRespondersError, NoServersError, StaleConnectionError, UnexpectedEOF
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig
from nats.js.errors import BadRequestError, NoStreamResponseError, NotFoundError, ServiceUnavailableError
from opentelemetry.trace import SpanKind

from popagent_core import subjects
from popagent_core.db import load_queries
from popagent_core.lifecycle import raise_if_cancelling, wait_event
from popagent_core.telemetry import TRACER, extracted, inject_headers

logger = logging.getLogger(__name__)

# Every service's outbox lives in its own schema of one database: each relay listens on the channel
# of its schema only (`popagent_outbox_<schema>`), so a commit wakes its own relay, not all of them.
OUTBOX_CHANNEL_PREFIX = "popagent_outbox_"
OUTBOX_QUERIES_FILE = Path(__file__).parent / "outbox_queries.sql"
OUTBOX_QUERIES = load_queries(OUTBOX_QUERIES_FILE)
PUBLISH_TIMEOUT_S = 2.0
# JetStream's error code for a stream created by another client between our look and our create.
STREAM_NAME_IN_USE = 10058
NO_SUITABLE_PEERS = 10005


CONNECTION_ERRORS = (OSError, UnexpectedEOF, StaleConnectionError, NoServersError)


class BrokerLog:
    """What a connection says about NATS going away: one warning when it is lost, then a
    reminder at doubling intervals (`first_reminder_s`, 2x, 4x, ... up to `max_reminder_s`)
    while it stays down, and one line when it is back. Never a traceback per reconnect
    attempt, which nats-py's default error callback logs (about 12 a second per stack)."""

    def __init__(self, name: str, first_reminder_s: float = 5.0, max_reminder_s: float = 300.0) -> None:
        self.name = name
        self.first_reminder_s = first_reminder_s
        self.max_reminder_s = max_reminder_s
        self.down_since: float | None = None
        # Set while this process drains and closes the connection: that disconnect is no outage.
        self.closing = False
        self._next_reminder = 0.0
        self._interval = first_reminder_s

    async def disconnected(self) -> None:
        loop_time = asyncio.get_running_loop().time()
        if self.down_since is None and not self.closing:
            self.down_since = loop_time
            self._interval = self.first_reminder_s
            self._next_reminder = loop_time + self._interval
            logger.warning("NATS connection lost; reconnecting", extra={"client": self.name})

    async def error(self, exc: Exception) -> None:
        loop_time = asyncio.get_running_loop().time()
        if self.closing:
            return
        if self.down_since is None and isinstance(exc, CONNECTION_ERRORS):
            # The read error comes before the disconnect callback: it is the same outage.
            await self.disconnected()
            return
        if self.down_since is None:
            logger.warning("NATS error", extra={"client": self.name, "error": type(exc).__name__})
            return
        if loop_time >= self._next_reminder:
            logger.warning(
                "NATS still unreachable; reconnecting",
                extra={
                    "client": self.name,
                    "down_s": round(loop_time - self.down_since, 1),
                    "error": type(exc).__name__,
                },
            )
            self._interval = min(self._interval * 2, self.max_reminder_s)
            self._next_reminder = loop_time + self._interval

    async def reconnected(self) -> None:
        if self.down_since is not None:
            down_s = asyncio.get_running_loop().time() - self.down_since
            logger.info("NATS connection restored", extra={"client": self.name, "down_s": round(down_s, 1)})
        self.down_since = None


def without_credentials(url: str) -> str:
    """`url` (one or several, comma-separated) with any user and password removed, for messages."""
    shown = []
    for part in url.split(","):
        parts = urlsplit(part.strip())
        shown.append(urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])))
    return ",".join(shown)


@contextlib.asynccontextmanager
async def connect(url: str, *, name: str, connect_timeout_s: float = 20.0) -> AsyncIterator[NatsClient]:
    """Connect (retrying the first connection until `connect_timeout_s`), drain on exit.

    `url` may carry the client's user and password (`nats://user:password@host:port`); no message
    says them."""
    deadline = asyncio.get_running_loop().time() + connect_timeout_s
    broker_log = BrokerLog(name)
    while True:
        try:
            nc = await nats.connect(
                url.split(","),
                name=f"popagent-{name}",
                inbox_prefix=subjects.inbox_prefix(name),
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                connect_timeout=2,
                error_cb=broker_log.error,
                disconnected_cb=broker_log.disconnected,
                reconnected_cb=broker_log.reconnected,
            )
            break
        except (OSError, NoServersError, TimeoutError) as exc:
            if asyncio.get_running_loop().time() > deadline:
                raise ConnectionError(f"NATS at {without_credentials(url)} unreachable: {exc}") from exc
            await asyncio.sleep(0.5)
    try:
        yield nc
    finally:
        broker_log.closing = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.drain(), timeout=3)
        if not nc.is_closed:
            await nc.close()


async def ensure_streams(js: JetStreamContext, owners: tuple[str, ...] = subjects.OWNERS, *, replicas: int = 1) -> None:
    """Create (or update) the JetStream stream of each owner, stored on `replicas` servers of a
    NATS cluster (POPAGENT_NATS_STREAM_REPLICAS; 1 on a single server). Idempotent; an update
    also changes an existing stream's replica count."""
    for owner in owners:
        config = StreamConfig(
            name=subjects.stream_name(owner),
            subjects=subjects.stream_subjects(owner),
            duplicate_window=120.0,
            max_age=7 * 24 * 3600.0,
            num_replicas=replicas,
        )
        await define_stream(js, config)


# How long a service at start waits for JetStream to answer: a cluster whose servers start
# beside the services (pods rolled together) has no meta leader until a majority has met.
JETSTREAM_READY_S = 60.0


async def define_stream(js: JetStreamContext, config: StreamConfig, *, within_s: float = JETSTREAM_READY_S) -> None:
    """Create `config`'s stream, or update it to `config`, retrying while JetStream does not
    answer (no meta leader yet, a stream's leader being elected: timeouts and 503s) for up to
    `within_s`. Several processes of a service may do this at once; the losers find it made."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    delay = 0.2
    while True:
        try:
            try:
                await js.stream_info(config.name)  # type: ignore[arg-type]
                await js.update_stream(config)
            except NotFoundError:
                await js.add_stream(config)
            return
        except (NatsTimeoutError, ServiceUnavailableError, BadRequestError) as exc:
            # 400s worth a retry: "stream name already in use" (a create another process won), "no
            # suitable peers for placement" (the cluster's servers have not all joined yet).
            if isinstance(exc, BadRequestError) and exc.err_code not in (STREAM_NAME_IN_USE, NO_SUITABLE_PEERS):
                raise
            if loop.time() + delay > deadline:
                raise
            logger.info(
                "JetStream not answering yet; retrying", extra={"stream": config.name, "error": type(exc).__name__}
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


async def enqueue_event(
    conn: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy, subject: str, payload: bytes
) -> uuid.UUID:
    """Write an event into the outbox inside the caller's transaction; returns its id."""
    subjects.owner_of(subject)  # refuses malformed subjects early
    event_id = uuid.uuid4()
    # The writer's trace context travels with the row, so the relayed message continues its trace.
    trace_context = inject_headers()
    await conn.execute(
        OUTBOX_QUERIES["enqueue"],
        event_id,
        subject,
        payload,
        OUTBOX_CHANNEL_PREFIX,
        orjson.dumps(trace_context).decode() if trace_context else None,
    )
    return event_id


class OutboxRelay:
    """Relays pending outbox rows of one schema to JetStream, in order, at least once."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        js: JetStreamContext,
        *,
        batch_size: int = 100,
        poll_interval_s: float = 1.0,
        coalesce_s: float = 0.02,
        max_backoff_s: float = 5.0,
        retention_s: float = 24 * 3600,
        stream_replicas: int = 1,
    ) -> None:
        self.pool = pool
        self.js = js
        # Used when the relay has to recreate its stream (a broker back without its store).
        self.stream_replicas = stream_replicas
        self.batch_size = batch_size
        self.poll_interval_s = poll_interval_s
        # Woken by a commit, the relay waits this long first, so the events other transactions
        # commit meanwhile go out in the same pass: a pass costs its transaction's round trips
        # whatever it carries, and a busy agent-runner commits dozens of turns a second.
        self.coalesce_s = coalesce_s
        self.max_backoff_s = max_backoff_s
        self.retention_s = retention_s
        self._wake = asyncio.Event()

    def wake(self, *_: object) -> None:
        self._wake.set()

    async def relay_once(self) -> int:
        """Publish one batch of pending rows; returns how many were published.

        Raises on a NATS failure after committing the rows it did publish.
        """
        published: list[object] = []
        async with self.pool.acquire() as conn, conn.transaction():
            # One relay of a schema at a time (a service may run several worker processes, each with
            # its relay): another relay waits for this batch's commit, then goes on from the next row,
            # so events leave in `seq` order whichever process relays them.
            await conn.execute(OUTBOX_QUERIES["lock_relay"])
            rows = await conn.fetch(OUTBOX_QUERIES["pending"], self.batch_size)
            failure: BaseException | None = None
            for row in rows:
                headers = {"Nats-Msg-Id": str(row["id"])}
                if row["trace_context"]:
                    headers.update(orjson.loads(row["trace_context"]))
                try:
                    await self.js.publish(
                        row["subject"],
                        bytes(row["payload"]),
                        timeout=PUBLISH_TIMEOUT_S,
                        headers=headers,
                    )
                except Exception as exc:
                    failure = exc
                    await conn.execute(OUTBOX_QUERIES["count_attempt"], row["id"])
                    if isinstance(exc, (NoRespondersError, NoStreamResponseError)):
                        # No stream answers for the subject: the broker came back without its
                        # store. Recreate the owner's stream so the retry can land.
                        await ensure_streams(
                            self.js, (subjects.owner_of(row["subject"]),), replicas=self.stream_replicas
                        )
                    break
                published.append(row["id"])
            if published:
                await conn.execute(OUTBOX_QUERIES["mark_published"], published)
        if failure is not None:
            raise failure
        return len(published)

    async def purge_published(self) -> None:
        async with self.pool.acquire() as conn:
            await conn.execute(OUTBOX_QUERIES["purge_published"], self.retention_s)

    async def run(self) -> None:
        """Relay until cancelled; any failure (database or NATS) is retried with backoff."""
        backoff = 0.1
        last_purge = 0.0
        loop = asyncio.get_running_loop()
        while True:
            try:
                async with self.pool.acquire() as listener:
                    channel = OUTBOX_CHANNEL_PREFIX + await listener.fetchval(OUTBOX_QUERIES["current_schema"])
                    await listener.add_listener(channel, self.wake)
                    try:
                        while True:
                            while await self.relay_once() == self.batch_size:
                                pass
                            backoff = 0.1
                            if loop.time() - last_purge > 3600:
                                await self.purge_published()
                                last_purge = loop.time()
                            self._wake.clear()
                            if await wait_event(self._wake, self.poll_interval_s):
                                await asyncio.sleep(self.coalesce_s)
                    finally:
                        with contextlib.suppress(Exception):
                            await listener.remove_listener(channel, self.wake)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning(
                    "outbox relay failed; retrying", extra={"error": type(exc).__name__, "backoff_s": backoff}
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)


Handler = Callable[[Msg], Awaitable[None]]
BatchHandler = Callable[[list[Msg]], Awaitable[None]]


async def consume(
    js: JetStreamContext,
    *,
    subject: str,
    durable: str,
    handler: Handler,
    ack_wait_s: float = 30.0,
    max_deliver: int = 10,
    batch: int = 10,
) -> None:
    """Durable pull consumer loop: explicit ack after the handler succeeds, nak on failure.

    Handlers must be idempotent (keyed on the `Nats-Msg-Id` header): delivery is at least once.
    While a batch is handled, every message of it not yet acked is marked in progress every
    third of `ack_wait_s`, so a handler that runs longer than `ack_wait_s` (or a message
    waiting behind one) is not redelivered meanwhile.
    Runs until cancelled; survives broker restarts by re-fetching.
    """

    async def each(messages: list[Msg], unsettled: list[Msg]) -> None:
        for msg in messages:
            await _handle(msg, handler)
            unsettled.remove(msg)

    await _consume_loop(js, subject, durable, each, ack_wait_s, max_deliver, batch)


async def consume_batches(
    js: JetStreamContext,
    *,
    subject: str,
    durable: str,
    handler: BatchHandler,
    ack_wait_s: float = 30.0,
    max_deliver: int = 10,
    batch: int = 100,
) -> None:
    """`consume`, with the handler given each fetched batch whole (one database round trip for
    many events): every message is acked after it succeeds, every one nak'ed when it fails."""

    async def whole(messages: list[Msg], unsettled: list[Msg]) -> None:
        try:
            await handler(messages)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("event batch handler failed", extra={"subject": subject, "messages": len(messages)})
            for msg in messages:
                await msg.nak(delay=1.0)
        else:
            for msg in messages:
                await msg.ack()
        unsettled.clear()

    await _consume_loop(js, subject, durable, whole, ack_wait_s, max_deliver, batch)


async def _consume_loop(
    js: JetStreamContext,
    subject: str,
    durable: str,
    process: Callable[[list[Msg], list[Msg]], Awaitable[None]],
    ack_wait_s: float,
    max_deliver: int,
    batch: int,
) -> None:
    stream = subjects.stream_name(subjects.owner_of(subject))
    sub = None
    last_error = ""
    while True:
        try:
            # `fetch` waits with asyncio.wait_for, which on Python 3.11 may swallow a cancellation.
            raise_if_cancelling()
            if sub is None:
                sub = await js.pull_subscribe(
                    subject,
                    durable=durable,
                    stream=stream,
                    config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=ack_wait_s, max_deliver=max_deliver),
                )
            try:
                messages = await sub.fetch(batch, timeout=1.0)
            except TimeoutError:
                continue
            last_error = ""
            unsettled = list(messages)
            async with _kept_in_progress(unsettled, ack_wait_s / 3):
                await process(messages, unsettled)
        except asyncio.CancelledError:
            # Leave no subscription behind: drain() on shutdown would wait for it.
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
            raise
        except Exception as exc:
            # The owning service may simply not have created its stream yet: say so once,
            # not every second until it does.
            level = logging.DEBUG if type(exc).__name__ == last_error else logging.WARNING
            last_error = type(exc).__name__
            logger.log(level, "consumer error; retrying", extra={"durable": durable, "error": last_error})
            sub = None
            await asyncio.sleep(1.0)


async def _handle(msg: Msg, handler: Handler) -> None:
    """Run the handler on one message, then ack it (or nak it after a failure)."""
    try:
        # The handler's work (its queries, RPCs and own events) joins the publisher's trace.
        with (
            extracted(msg.headers),
            TRACER.start_as_current_span(
                f"{msg.subject} process",
                kind=SpanKind.CONSUMER,
                attributes={"messaging.system": "nats", "messaging.destination.name": msg.subject},
            ),
        ):
            await handler(msg)
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.exception("event handler failed", extra={"subject": msg.subject})
        await msg.nak(delay=1.0)
    else:
        await msg.ack()


@contextlib.asynccontextmanager
async def _kept_in_progress(unsettled: list[Msg], interval_s: float) -> AsyncIterator[None]:
    """While the block runs, tell JetStream every `interval_s` that each unsettled message is
    still being worked on (`+WPI`), which restarts its ack_wait."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(interval_s)
            for msg in list(unsettled):
                with contextlib.suppress(Exception):
                    await msg.in_progress()

    task = asyncio.create_task(beat(), name="jetstream-in-progress")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
