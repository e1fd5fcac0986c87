"""Transactional outbox and JetStream consumers against real PostgreSQL and NATS."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal, cast

import asyncpg
import pytest
from nats.aio.msg import Msg

from popagent_core import bus, db, subjects
from popagent_core.lifecycle import background_task
from popagent_core.migrate import migrate
from popagent_dev import embedded
from support.waiting import eventually

from .helpers import stream_messages, unique_subject

SCHEMA = "evolution"
STREAM = subjects.stream_name(SCHEMA)
# How long a woken relay waits for more commits in the coalescing test: four one-row transactions
# take milliseconds on an idle machine and well under a second at a load average of 15.
COALESCE_S = 3.0


@pytest.fixture
async def dsn(make_database, tmp_path: Path) -> str:
    """A database whose schema holds only the kernel tables (the outbox among them)."""
    dsn = await make_database()
    await migrate(dsn, SCHEMA, tmp_path / "no-service-migrations")
    return dsn


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[asyncpg.Pool]:
    async with db.open_pool(dsn, SCHEMA, max_size=4) as pool:
        yield pool


@contextlib.asynccontextmanager
async def jetstream(url: str) -> AsyncIterator[bus.JetStreamContext]:
    async with bus.connect(url, name="core-tests") as nc:
        js = nc.jetstream()
        await bus.ensure_streams(js, (SCHEMA,))
        yield js


async def enqueue(pool: asyncpg.Pool, subject: str, *payloads: bytes) -> list[str]:
    async with pool.acquire() as conn, conn.transaction():
        # enqueue_event is typed for a bare Connection; a pool hands out a proxy of one.
        connection = cast(asyncpg.Connection, conn)
        return [str(await bus.enqueue_event(connection, subject, payload)) for payload in payloads]


async def enqueue_each(pool: asyncpg.Pool, subject: str, *payloads: bytes) -> list[str]:
    """One transaction per event, as separate state changes would do."""
    return [(await enqueue(pool, subject, payload))[0] for payload in payloads]


async def pending_rows(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return await pool.fetch("SELECT id, attempts FROM popagent_outbox WHERE published_at IS NULL ORDER BY created_at")


async def all_marked(pool: asyncpg.Pool) -> bool:
    return await pending_rows(pool) == []


async def test_an_event_enqueued_in_a_rolled_back_transaction_is_never_published(pool, nats_url):
    subject = unique_subject()
    async with jetstream(nats_url) as js:
        relay = bus.OutboxRelay(pool, js)
        async with pool.acquire() as conn:
            with pytest.raises(RuntimeError, match="state change failed"):
                async with conn.transaction():
                    await bus.enqueue_event(cast(asyncpg.Connection, conn), subject, b"rolled back")
                    raise RuntimeError("state change failed")
        [kept] = await enqueue(pool, subject, b"committed")

        assert await relay.relay_once() == 1

        messages = await stream_messages(js, subject)
    assert [m.data for m in messages] == [b"committed"]
    assert [m.headers and m.headers["Nats-Msg-Id"] for m in messages] == [kept]
    assert await pool.fetchval("SELECT count(*) FROM popagent_outbox") == 1


async def test_committed_events_reach_jetstream_in_order_with_the_outbox_id_as_msg_id(pool, nats_url):
    subject = unique_subject()
    async with jetstream(nats_url) as js:
        relay = bus.OutboxRelay(pool, js, poll_interval_s=0.2)
        # The running relay is woken by NOTIFY; nothing calls relay_once by hand here.
        async with background_task(relay.run, name="relay"):
            ids = await enqueue_each(pool, subject, b"one", b"two", b"three")

            async def all_arrived() -> bool:
                return len(await stream_messages(js, subject)) == 3

            await eventually(all_arrived, what="three events in the stream")
            # Rows are marked when the relay's transaction commits, just after the publishes.
            await eventually(lambda: all_marked(pool), what="the rows to be marked published")
            messages = await stream_messages(js, subject)

    assert [m.data for m in messages] == [b"one", b"two", b"three"]
    assert [m.headers and m.headers["Nats-Msg-Id"] for m in messages] == ids


async def test_events_enqueued_in_one_transaction_are_published_in_enqueue_order(pool, nats_url):
    subject = unique_subject()
    payloads = [f"step-{i}".encode() for i in range(8)]
    async with jetstream(nats_url) as js:
        ids = await enqueue(pool, subject, *payloads)

        assert await bus.OutboxRelay(pool, js).relay_once() == len(payloads)

        messages = await stream_messages(js, subject)
    assert [m.data for m in messages] == payloads
    assert [m.headers and m.headers["Nats-Msg-Id"] for m in messages] == ids


async def test_enqueue_refuses_a_subject_outside_the_naming_scheme(pool):
    async with pool.acquire() as conn:
        for bad in ("popagent.nobody.thing.happened", "tasks.task.stopped", "popagent.tasks.stopped"):
            with pytest.raises(ValueError, match=r"popagent\.<owner>"):
                await bus.enqueue_event(cast(asyncpg.Connection, conn), bad, b"x")
    assert await pool.fetchval("SELECT count(*) FROM popagent_outbox") == 0


async def test_events_enqueued_while_nats_is_down_are_delivered_in_order_once_it_returns(
    pool, nats_server: embedded.NatsProcess, tmp_path: Path
):
    subject = unique_subject()
    store_dir = tmp_path / "nats"  # the fixture's store: the restarted server must find the stream there
    restarted: embedded.NatsProcess | None = None
    try:
        async with jetstream(nats_server.url) as js:
            relay = bus.OutboxRelay(pool, js, poll_interval_s=0.2, max_backoff_s=0.5)
            async with background_task(relay.run, name="relay"):
                before = await enqueue_each(pool, subject, b"before-0", b"before-1")

                async def count_is(n: int) -> bool:
                    return len(await stream_messages(js, subject)) == n

                await eventually(lambda: count_is(2), what="events sent before the outage")

                await asyncio.to_thread(nats_server.stop)
                during = []
                for i in range(5):
                    during += await enqueue(pool, subject, f"during-{i}".encode())

                async def relay_tried() -> bool:
                    rows = await pending_rows(pool)
                    return len(rows) == 5 and rows[0]["attempts"] >= 2

                # The relay must have tried and failed during the outage, or this test proves nothing.
                await eventually(relay_tried, what="failed publish attempts during the outage")

                restarted = await asyncio.to_thread(embedded.start_nats, store_dir, nats_server.port)

                await eventually(lambda: count_is(7), within=30, what="all seven events after the restart")
                await eventually(lambda: all_marked(pool), what="the rows to be marked published")
                await asyncio.sleep(0.5)  # a late duplicate would show up here
                messages = await stream_messages(js, subject)
    finally:
        if restarted is not None:
            restarted.stop()

    assert [m.data for m in messages] == [b"before-0", b"before-1"] + [f"during-{i}".encode() for i in range(5)]
    assert [m.headers and m.headers["Nats-Msg-Id"] for m in messages] == before + during


async def test_a_republished_row_keeps_its_msg_id_and_jetstream_drops_the_duplicate(pool, nats_url):
    subject = unique_subject()
    async with jetstream(nats_url) as js:
        relay = bus.OutboxRelay(pool, js)
        [event_id] = await enqueue(pool, subject, b"once")
        assert await relay.relay_once() == 1
        # What a crash between publish and marking the row leaves behind.
        await pool.execute("UPDATE popagent_outbox SET published_at = NULL")

        assert await relay.relay_once() == 1

        messages = await stream_messages(js, subject)
        info = await js.stream_info(STREAM, subjects_filter=subject)
    assert [m.headers and m.headers["Nats-Msg-Id"] for m in messages] == [event_id]
    assert info.state.subjects == {subject: 1}


async def test_the_relay_purges_published_rows_after_the_retention_period_only(pool, nats_url):
    subject = unique_subject()
    async with jetstream(nats_url) as js:
        relay = bus.OutboxRelay(pool, js, retention_s=3600)
        old, recent = await enqueue(pool, subject, b"old", b"recent")
        await relay.relay_once()
        await pool.execute("UPDATE popagent_outbox SET published_at = now() - interval '2 hours' WHERE id = $1", old)
        [unpublished] = await enqueue(pool, subject, b"unpublished")

        await relay.purge_published()

    remaining = {str(row["id"]) for row in await pool.fetch("SELECT id FROM popagent_outbox")}
    assert remaining == {recent, unpublished}


async def publish_through_outbox(
    pool: asyncpg.Pool, js: bus.JetStreamContext, subject: str, *payloads: bytes
) -> list[str]:
    ids = await enqueue_each(pool, subject, *payloads)
    assert await bus.OutboxRelay(pool, js).relay_once() == len(payloads)
    return ids


async def test_consume_delivers_to_a_durable_consumer_and_acks(pool, nats_url):
    subject = unique_subject()
    durable = f"core-test-{subject.split('.')[2]}"
    received: list[tuple[str, bytes]] = []

    async def handler(msg: Msg) -> None:
        received.append((msg.headers["Nats-Msg-Id"] if msg.headers else "", msg.data))

    async with jetstream(nats_url) as js:
        ids = await publish_through_outbox(pool, js, subject, b"a", b"b")
        try:
            async with background_task(
                lambda: bus.consume(js, subject=subject, durable=durable, handler=handler), name="consumer"
            ):
                await eventually(lambda: len(received) == 2, what="both events handled")

                async def all_acked() -> bool:
                    info = await js.consumer_info(STREAM, durable)
                    return info.num_ack_pending == 0 and info.num_pending == 0

                await eventually(all_acked, what="the consumer to have acked everything")
            info = await js.consumer_info(STREAM, durable)
        finally:
            await js.delete_consumer(STREAM, durable)

    assert received == [(ids[0], b"a"), (ids[1], b"b")]
    assert info.config.durable_name == durable
    assert info.delivered is not None and info.delivered.consumer_seq == 2
    assert info.num_redelivered == 0


async def test_a_handler_that_raises_gets_the_message_redelivered(pool, nats_url):
    subject = unique_subject()
    durable = f"core-test-{subject.split('.')[2]}"
    deliveries: list[tuple[str, int]] = []

    async def flaky_handler(msg: Msg) -> None:
        deliveries.append((msg.headers["Nats-Msg-Id"] if msg.headers else "", msg.metadata.num_delivered))
        if len(deliveries) == 1:
            raise RuntimeError("transient failure")

    async with jetstream(nats_url) as js:
        [event_id] = await publish_through_outbox(pool, js, subject, b"retry me")
        try:
            async with background_task(
                lambda: bus.consume(js, subject=subject, durable=durable, handler=flaky_handler), name="consumer"
            ):
                await eventually(lambda: len(deliveries) >= 2, what="a redelivery")

                async def acked() -> bool:
                    return (await js.consumer_info(STREAM, durable)).num_ack_pending == 0

                await eventually(acked, what="the redelivered message to be acked")
                await asyncio.sleep(0.3)  # no third delivery once the handler succeeded
        finally:
            await js.delete_consumer(STREAM, durable)

    assert deliveries == [(event_id, 1), (event_id, 2)]


async def test_a_cancelled_consumer_lets_the_connection_close_promptly(pool, nats_url):
    # Shutdown budgets (SIGTERM -> exit within seconds) assume draining NATS is quick once
    # the consumer tasks are cancelled; a subscription left behind makes drain() wait out its timeout.
    subject = unique_subject()
    durable = f"core-test-{subject.split('.')[2]}"
    handled: list[bytes] = []

    async def handler(msg: Msg) -> None:
        handled.append(msg.data)

    loop = asyncio.get_running_loop()
    async with jetstream(nats_url) as js:
        await publish_through_outbox(pool, js, subject, b"a", b"b")
        async with background_task(
            lambda: bus.consume(js, subject=subject, durable=durable, handler=handler), name="consumer"
        ):
            await eventually(lambda: len(handled) == 2, what="both events handled")
        await js.delete_consumer(STREAM, durable)
        closing_started = loop.time()
    closing_took = loop.time() - closing_started

    assert handled == [b"a", b"b"]
    assert closing_took < 1.0, f"closing the NATS connection took {closing_took:.1f}s"


async def test_a_broker_that_returns_without_its_store_gets_the_stream_back_and_the_events(
    pool, nats_server: embedded.NatsProcess, tmp_path: Path
):
    subject = unique_subject()
    restarted: embedded.NatsProcess | None = None
    try:
        async with jetstream(nats_server.url) as js:
            relay = bus.OutboxRelay(pool, js, poll_interval_s=0.2, max_backoff_s=0.5)
            async with background_task(relay.run, name="relay"):
                await asyncio.to_thread(nats_server.stop)
                # Same port, empty store: the stream is gone and publishes find no responder.
                restarted = await asyncio.to_thread(embedded.start_nats, tmp_path / "empty-store", nats_server.port)
                ids = await enqueue_each(pool, subject, b"after-0", b"after-1")

                async def both_arrived() -> bool:
                    try:
                        return len(await stream_messages(js, subject)) == 2
                    except Exception:
                        return False

                await eventually(both_arrived, within=30, what="events after the stream was recreated")
                messages = await stream_messages(js, subject)
    finally:
        if restarted is not None:
            restarted.stop()
    assert [m.headers and m.headers["Nats-Msg-Id"] for m in messages] == ids


async def test_relays_of_several_worker_processes_keep_the_order_and_publish_each_event_once(pool, dsn, nats_url):
    # A service's worker processes each run a relay (with a pool of its own) on the same outbox:
    # while events are enqueued, three relays race; JetStream must still get every event once, in order.
    subject = unique_subject()
    payloads = [f"event-{i:03d}".encode() for i in range(120)]
    async with jetstream(nats_url) as js, contextlib.AsyncExitStack() as running:
        for number in range(3):
            own_pool = await running.enter_async_context(db.open_pool(dsn, SCHEMA, max_size=2))
            relay = bus.OutboxRelay(own_pool, js, batch_size=7, poll_interval_s=0.05)
            await running.enter_async_context(background_task(relay.run, name=f"relay-{number}"))
        ids: list[str] = []
        for start in range(0, len(payloads), 40):
            # 40 rows per commit: each wake-up finds a backlog the three relays could split.
            ids += await enqueue(pool, subject, *payloads[start : start + 40])
            await asyncio.sleep(0.02)

        async def all_arrived() -> bool:
            return len(await stream_messages(js, subject)) >= len(payloads)

        await eventually(all_arrived, what="every event in the stream")
        await eventually(lambda: all_marked(pool), what="every row marked published")
        messages = await stream_messages(js, subject)
    assert [m.data for m in messages] == payloads
    assert [m.headers and m.headers["Nats-Msg-Id"] for m in messages] == ids


async def test_a_commit_wakes_the_relay_without_waiting_for_its_poll(pool, nats_url):
    subject = unique_subject()
    async with jetstream(nats_url) as js:
        relay = bus.OutboxRelay(pool, js, poll_interval_s=30.0)
        async with background_task(relay.run, name="relay"):
            await asyncio.sleep(0.2)  # the relay has done its first pass and waits for a wake-up
            started = asyncio.get_running_loop().time()
            await enqueue(pool, subject, b"wake")

            async def arrived() -> bool:
                return len(await stream_messages(js, subject)) == 1

            await eventually(arrived, what="the event, long before the 30 s poll")
            took = asyncio.get_running_loop().time() - started
    assert took < 5.0


class WatchedEvent(asyncio.Event):
    """An event that knows whether something waits on it."""

    waiting = 0

    async def wait(self) -> Literal[True]:
        self.waiting += 1
        try:
            return await super().wait()
        finally:
            self.waiting -= 1


class CountingRelay(bus.OutboxRelay):
    passes = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wake = self.wake_event = WatchedEvent()

    async def relay_once(self) -> int:
        self.passes += 1
        return await super().relay_once()

    def waiting_for_a_wake_up(self) -> bool:
        """It has done a pass and now waits for a wake-up (not somewhere on its way there)."""
        return self.passes >= 1 and self.wake_event.waiting > 0


async def test_events_committed_while_the_woken_relay_waits_go_out_in_its_one_pass(pool, nats_url):
    subject = unique_subject()
    async with jetstream(nats_url) as js:
        # The woken relay waits COALESCE_S: long enough for four small commits even on a loaded machine.
        relay = CountingRelay(pool, js, poll_interval_s=30.0, coalesce_s=COALESCE_S)
        async with background_task(relay.run, name="relay"):
            await eventually(relay.waiting_for_a_wake_up, what="the relay's first pass, then its wait for a wake-up")
            passes = relay.passes
            # Four transactions, each a wake-up, within the time the woken relay waits.
            began = asyncio.get_running_loop().time()
            ids = await enqueue_each(pool, subject, b"1", b"2", b"3", b"4")
            took = asyncio.get_running_loop().time() - began
            assert took < COALESCE_S, f"the four commits took {took:.2f} s, longer than the relay waits"

            async def arrived() -> bool:
                return len(await stream_messages(js, subject)) == 4

            await eventually(arrived, what="the four events")
            # The pass commits its rows as published after the publishes the stream shows.
            await eventually(lambda: all_marked(pool), what="the four rows to be marked published")
            assert relay.passes - passes == 1
            messages = await stream_messages(js, subject)
            assert [m.headers and m.headers["Nats-Msg-Id"] for m in messages] == ids


async def test_a_commit_in_another_schema_does_not_wake_this_relay(pool, dsn, tmp_path: Path, nats_url):
    # Every service keeps its outbox in its own schema of one database; a turn's event must not
    # wake the relays of the other six services (each would run an empty transaction per event).
    await migrate(dsn, "tasks", tmp_path / "no-tasks-migrations")
    async with jetstream(nats_url) as js, db.open_pool(dsn, "tasks", max_size=2) as other_pool:
        await bus.ensure_streams(js, ("tasks",))
        relay = CountingRelay(pool, js, poll_interval_s=30.0)
        async with background_task(relay.run, name="relay"):
            await eventually(relay.waiting_for_a_wake_up, what="the relay's first pass, then its wait for a wake-up")
            before = relay.passes
            for n in range(5):
                await enqueue(other_pool, f"popagent.tasks.test{n}.happened", b"elsewhere")
            await asyncio.sleep(0.5)
            assert relay.passes == before, "another schema's commits woke this relay"
            await enqueue(pool, unique_subject(), b"here")

            async def woken() -> bool:
                return relay.passes > before

            await eventually(woken, what="this schema's commit to wake its relay")


class SwallowingSubscription:
    """A pull subscription whose fetch, once, loses a cancellation to its own timeout: what
    `asyncio.wait_for` (which nats.py's fetch uses) does on Python 3.11 when the two race."""

    def __init__(self) -> None:
        self.swallowed = False
        self.fetches = 0

    async def fetch(self, batch: int, timeout: float) -> list[Msg]:  # noqa: ASYNC109 - nats.py's signature
        self.fetches += 1
        try:
            await asyncio.sleep(timeout)
        except asyncio.CancelledError:
            if self.swallowed:
                raise
            self.swallowed = True
        raise TimeoutError

    async def unsubscribe(self) -> None:
        return None


class OneSubscriptionJetStream:
    def __init__(self, subscription: SwallowingSubscription) -> None:
        self.subscription = subscription

    async def pull_subscribe(self, *args: object, **kwargs: object) -> SwallowingSubscription:
        return self.subscription


async def test_a_consumer_stops_even_when_a_fetch_swallowed_its_cancellation():
    subscription = SwallowingSubscription()
    js = cast(bus.JetStreamContext, OneSubscriptionJetStream(subscription))

    async def handler(msg: Msg) -> None:
        raise AssertionError("no message is fetched")

    task = asyncio.create_task(bus.consume(js, subject=unique_subject(), durable="swallow", handler=handler))
    await asyncio.sleep(0.05)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=3)
    if not done:
        task.cancel()  # the fetch swallows only once: this one ends the loop
        await asyncio.wait({task}, timeout=3)
    assert subscription.swallowed
    assert task in done and task.cancelled()
    assert subscription.fetches == 1


async def test_a_handler_running_twice_ack_wait_has_one_effect_and_no_redelivery(pool, nats_url):
    subject = unique_subject()
    durable = f"core-test-{subject.split('.')[2]}"
    ack_wait_s = 1.0
    effects: list[tuple[bytes, int]] = []

    async def slow_handler(msg: Msg) -> None:
        if msg.data == b"slow":
            await asyncio.sleep(2 * ack_wait_s)
        effects.append((msg.data, msg.metadata.num_delivered))

    async with jetstream(nats_url) as js:
        # The second event waits in the same batch behind the slow one: it must not expire either.
        await publish_through_outbox(pool, js, subject, b"slow", b"behind")
        try:
            # Two consumers of the same durable, as two replicas of a service: one that is idle
            # would take over a message whose ack_wait expired while the other still works on it.
            async with (
                background_task(
                    lambda: bus.consume(
                        js, subject=subject, durable=durable, handler=slow_handler, ack_wait_s=ack_wait_s
                    ),
                    name="consumer-1",
                ),
                background_task(
                    lambda: bus.consume(
                        js, subject=subject, durable=durable, handler=slow_handler, ack_wait_s=ack_wait_s
                    ),
                    name="consumer-2",
                ),
            ):
                await eventually(lambda: len(effects) >= 2, what="both events handled")

                async def acked() -> bool:
                    info = await js.consumer_info(STREAM, durable)
                    return info.num_ack_pending == 0 and info.num_pending == 0

                await eventually(acked, what="both events acked")
                await asyncio.sleep(ack_wait_s * 1.5)  # a redelivery would have come by now
            info = await js.consumer_info(STREAM, durable)
        finally:
            await js.delete_consumer(STREAM, durable)

    assert sorted(effects) == [(b"behind", 1), (b"slow", 1)]
    assert info.num_redelivered == 0


async def test_consume_batches_hands_over_whole_batches_and_redelivers_a_failed_one(pool, nats_url):
    subject = unique_subject()
    durable = f"core-test-{subject.split('.')[2]}"
    batches: list[list[bytes]] = []

    async def handler(messages: list[Msg]) -> None:
        batches.append([m.data for m in messages])
        if len(batches) == 1:
            raise RuntimeError("the first batch fails")

    async with jetstream(nats_url) as js:
        await publish_through_outbox(pool, js, subject, b"a", b"b", b"c")
        try:
            async with background_task(
                lambda: bus.consume_batches(js, subject=subject, durable=durable, handler=handler), name="consumer"
            ):
                await eventually(lambda: sum(map(len, batches)) >= 6, what="the batch, then its redelivery")

                async def acked() -> bool:
                    info = await js.consumer_info(STREAM, durable)
                    return info.num_ack_pending == 0 and info.num_pending == 0

                await eventually(acked, what="the redelivered batch acked")
        finally:
            await js.delete_consumer(STREAM, durable)

    assert batches[0] == [b"a", b"b", b"c"]
    assert sorted(b for batch in batches[1:] for b in batch) == [b"a", b"b", b"c"]
