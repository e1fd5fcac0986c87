"""Waiting for something that happens in another task, thread or process: `eventually` (and
`wait_until`, the same for blocking code).

Every suite polls the same way (a database row, a hook delivery, a worker's slots, a
stream's messages), so there is one helper for it, and a failure always says what was
awaited and what was last seen.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T] | T],
    *,
    until: Callable[[T], object] = bool,
    within: float = 15.0,
    interval: float = 0.05,
    what: str = "",
) -> T:
    """Call `check` (sync or async) until `until` holds for its value, and return that value.

    Fails with an AssertionError naming `what` (or `check`) and the last value once `within`
    seconds have passed; `check` is always called at least once.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        result = check()
        value = cast(T, await result if inspect.isawaitable(result) else result)
        if until(value):
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what or check}; last value: {value!r}")
        await asyncio.sleep(interval)


def wait_until(
    check: Callable[[], T],
    *,
    until: Callable[[T], object] = bool,
    within: float = 15.0,
    interval: float = 0.1,
    what: str = "",
) -> T:
    """`eventually` for code without an event loop (a launched stack driven over blocking HTTP)."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if until(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what or check}; last value: {value!r}")
        time.sleep(interval)


# How long a child process may take to start (imports, migrations, listening) or to stop on its
# own, when the machine runs other work beside the suite: a start that takes 2 s on an idle box
# took over 60 s at a load average of 15 on 2 cores. Tests that wait this long mark a pytest
# timeout above it (TEST_WITH_A_START_S); the bars a product states are measured after the start.
START_WITHIN_S = 180.0
TEST_WITH_A_START_S = START_WITHIN_S + 120.0


async def exited(
    process: asyncio.subprocess.Process, *, within: float = START_WITHIN_S, what: str = ""
) -> tuple[bytes, bytes]:
    """`process.communicate()` once the process has exited on its own: its stdout and stderr.

    Kills it and fails with an AssertionError naming `what` if it is still running after
    `within` seconds.
    """
    try:
        return await asyncio.wait_for(process.communicate(), timeout=within)
    except TimeoutError:
        if process.returncode is None:
            process.kill()
            await process.wait()
        raise AssertionError(f"timed out after {within} s waiting for {what or 'the process'} to exit") from None


def run_queue_wait_s() -> float:
    """Seconds the calling thread has spent so far runnable but waiting for a CPU (Linux
    schedstat; 0.0 where the kernel keeps none).

    Its growth over a timed step is what other work on the machine cost that step, so a bar on
    the step's own latency (a deadline plus a margin) can leave it out: a wait the code under test
    makes (a sleep, a socket, a timer) or work it does on this thread is not run-queue time.
    """
    try:
        with open("/proc/thread-self/schedstat") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0
