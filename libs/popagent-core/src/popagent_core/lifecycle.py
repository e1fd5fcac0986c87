"""Process lifecycle: build the service inside an AsyncExitStack, stop on SIGTERM/SIGINT.

`build(settings)` is an async context manager that opens everything in dependency
order and yields once the service is ready; unwinding closes it in reverse (stop
accepting RPCs with a grace period, drain NATS, close the pool).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

import uvloop

from popagent_core.log import configure_logging
from popagent_core.settings import ServiceSettings
from popagent_core.telemetry import configure_telemetry, shutdown_telemetry

logger = logging.getLogger(__name__)

S = TypeVar("S", bound=ServiceSettings)

# Allocations between young-generation collections once a service is serving (CPython's default: 700).
YOUNG_COLLECTION_THRESHOLD = 20_000


def settle_heap() -> None:
    """Tune the cyclic garbage collector for serving, once start-up has built everything long-lived.

    What start-up built (modules, settings, pools, validators: in agent-runner, a great many
    objects) lives as long as the process, yet every full collection walked all of it again with
    the event loop stopped. Frozen, it is never scanned again. A chat turn allocates thousands of
    short-lived containers, so at CPython's default young threshold (700) the collector ran after
    nearly every turn; at 20 000 it runs far less often, and freezing plus the higher threshold cut
    most of the time a service spent collecting and some of its CPU per turn. `bench/chat.py`
    prints each process's CPU per streamed chunk, which is where a change here shows.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD)


async def serve_until_signalled(build: Callable[[S], AbstractAsyncContextManager[object]], settings: S) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with build(settings):
        settle_heap()
        logger.info("ready")
        await stop.wait()
        logger.info("stopping")
    logger.info("stopped")


def run(service: str, build: Callable[[S], AbstractAsyncContextManager[object]], settings: S) -> None:
    """Run one service process until SIGTERM/SIGINT. Exit code 1 on a start-up failure."""
    configure_logging(service, settings.log_level)
    configure_telemetry(service)
    try:
        uvloop.run(serve_until_signalled(build, settings))
    except KeyboardInterrupt:
        pass
    except Exception:
        logger.exception("service failed")
        raise SystemExit(1) from None
    finally:
        shutdown_telemetry()


@contextlib.asynccontextmanager
async def background_task(coro_factory: Callable[[], object], name: str):  # type: ignore[no-untyped-def]
    """Run a coroutine for the lifetime of the context; cancel and await it on exit."""
    task = asyncio.create_task(coro_factory(), name=name)  # type: ignore[arg-type]
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def raise_if_cancelling() -> None:
    """Raise CancelledError in a task that was asked to stop and went on anyway (see `wait_event`)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait for `event` at most `seconds`; True if it is set.

    Unlike `asyncio.wait_for` on Python 3.11 (CPython gh-86296), a cancellation that
    arrives just as the event is set is never swallowed, so a loop built on this always
    stops when cancelled. That includes a cancellation something the loop awaited before
    swallowed: nats.py awaits every publish acknowledgement with `asyncio.wait_for`, and an
    outbox relay cancelled just as an acknowledgement arrived went on relaying, so its
    service never finished stopping (tests/tasks/test_processes.py's SIGTERM test caught it).
    """
    raise_if_cancelling()
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait({waiter}, timeout=seconds)
    finally:
        waiter.cancel()
    return bool(done)
