"""The gateway's connection limits against hostile clients, over real sockets to the real
`python -m popagent_gateway` process: Slowloris crowds, silent connections, short and trickling
bodies, idle keep-alive connections, and the connection bound's 503."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from popagent_core.credentials import generate_credentials
from popagent_dev.embedded import free_port, terminate
from support.waiting import START_WITHIN_S, TEST_WITH_A_START_S, eventually

API_KEY = "e" * 32
# The head of an authorized POST /api/chat up to its body headers, sent by hand to stall the body.
CHAT_HEAD = (
    b"POST /api/chat HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
    b"x-popagent-key: " + API_KEY.encode() + b"\r\n"
)
HEADER_TIMEOUT_S = 4.0
BODY_TIMEOUT_S = 2.0
BODY_MIN_RATE = 500
IDLE_TIMEOUT_S = 2.0
# How much later than its timeout a stalled connection may be closed on this loaded machine.
SLACK_S = 6.0
CROWD = 2000


@dataclass
class Gateway:
    host: str
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def raise_fd_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        pytest.fail(f"the test needs {wanted} open files and the hard limit allows {soft}")


@contextlib.contextmanager
def gateway_process(tmp_path: Path, **limits: str) -> Iterator[Gateway]:
    tokens, _callers = generate_credentials()
    port = free_port()
    environment = os.environ | {
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "OBSERVABILITY_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "POPAGENT_API_KEY": API_KEY,
        "POPAGENT_INTERNAL_TOKEN": tokens["gateway"],
        "POPAGENT_AGENT_RUNNER_ADDR": f"127.0.0.1:{free_port()}",
        "POPAGENT_GATEWAY_PORT": str(port),
        "POPAGENT_UI_DIR": "/nonexistent/popagent-ui",
        "POPAGENT_GATEWAY_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
        "POPAGENT_GATEWAY_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "POPAGENT_GATEWAY_BODY_MIN_RATE": str(BODY_MIN_RATE),
        "POPAGENT_GATEWAY_IDLE_TIMEOUT_S": str(IDLE_TIMEOUT_S),
    }
    environment.update(limits)
    log = tmp_path / f"gateway-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "popagent_gateway"], env=environment, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield Gateway("127.0.0.1", port, log)
    finally:
        terminate(process, 15)


async def started(gateway: Gateway) -> None:
    """Until the gateway answers: its start (and its first /openapi.json, which builds the
    document) is not what these tests measure, and on a loaded machine it takes a minute and more."""
    async with httpx.AsyncClient(timeout=30) as client:

        async def answers() -> bool:
            try:
                return (await client.get(f"{gateway.url}/openapi.json")).status_code == 200
            except httpx.TransportError:
                return False

        await eventually(answers, within=START_WITHIN_S, interval=0.1, what="the gateway to answer")


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    """A gateway process of the test's own (its log holds only what this test made it write)."""
    raise_fd_limit(CROWD * 2 + 1024)  # the gateway inherits it: the crowd must not hit its fd limit
    with gateway_process(tmp_path, POPAGENT_GATEWAY_MAX_CONNECTIONS=str(CROWD + 500)) as running:
        await started(running)
        yield running


@pytest.fixture(scope="module")
async def shared_gateway(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    """One gateway process for the module's tests that each hold a connection of their own and read
    nothing but its answer: each start costs seconds of a core (a minute on a loaded machine)."""
    with gateway_process(tmp_path_factory.mktemp("shared-gateway")) as running:
        await started(running)
        yield running


RESET = b"<reset>"


async def closed_within(reader: asyncio.StreamReader, within_s: float) -> bytes:
    """Everything the server sent until it closed the connection (fails if it did not close). A
    close while the client's own bytes were still unread is a reset, marked RESET; so is a close met
    by the client's next write (EPIPE: the transport then raises that on the next read)."""
    received = b""
    deadline = time.monotonic() + within_s
    while True:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), timeout=max(0.01, deadline - time.monotonic()))
        except (ConnectionResetError, BrokenPipeError):
            return received or RESET
        if not chunk:
            return received
        received += chunk


async def assert_closed_with_408(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout_s: float) -> None:
    """The gateway answers 408 and closes the connection, no sooner than `timeout_s` from now (less half a second)."""
    began = time.monotonic()
    try:
        answer = await closed_within(reader, timeout_s + SLACK_S)
    finally:
        writer.close()
    assert time.monotonic() - began >= timeout_s - 0.5
    assert answer.startswith(b"HTTP/1.1 408 ")


async def timed_get(client: httpx.AsyncClient, url: str) -> float:
    began = time.perf_counter()
    response = await client.get(url)
    assert response.status_code == 200
    return time.perf_counter() - began


async def sample(client: httpx.AsyncClient, url: str, count: int) -> list[float]:
    return [await timed_get(client, url) for _ in range(count)]


@pytest.mark.timeout(TEST_WITH_A_START_S + 60)
async def test_a_slowloris_crowd_is_closed_by_the_header_timeout_while_others_are_served(gateway: Gateway) -> None:
    async with httpx.AsyncClient(timeout=10, headers={"x-popagent-key": API_KEY}) as client:
        url = f"{gateway.url}/openapi.json"
        await sample(client, url, 5)
        baseline = statistics.median(await sample(client, url, 30))

        # 2,000 connections each send a request line and part of a header, then one more header
        # line every second: Slowloris. None ever completes its head.
        crowd: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        opened_at = time.monotonic()
        for _ in range(CROWD // 100):
            batch = await asyncio.gather(*(asyncio.open_connection(gateway.host, gateway.port) for _ in range(100)))
            for _reader, writer in batch:
                writer.write(b"GET /api/health HTTP/1.1\r\nHost: gateway\r\nX-Slow: ")
            crowd.extend(batch)
        all_open_at = time.monotonic()

        async def trickle() -> None:
            while True:
                await asyncio.sleep(1)
                for _reader, writer in crowd:
                    if not writer.is_closing():
                        with contextlib.suppress(ConnectionError):
                            writer.write(b"x")

        trickling = asyncio.create_task(trickle())
        try:
            # Normal requests while the crowd holds its connections open (the head timeout
            # has not yet passed for any of them).
            during = await sample(client, url, 20)
            assert time.monotonic() - all_open_at < HEADER_TIMEOUT_S, "the crowd was not held while sampling"
            assert statistics.median(during) <= 2 * baseline + 0.05, (baseline, during)

            # Every stalled connection is answered 408 and closed by the header timeout.
            answers = await asyncio.gather(
                *(closed_within(reader, HEADER_TIMEOUT_S + SLACK_S + (all_open_at - opened_at)) for reader, _ in crowd)
            )
        finally:
            trickling.cancel()
            for _reader, writer in crowd:
                writer.close()
        # Answered 408 and closed (or reset: a trickled byte arrived after the close).
        assert all(answer.startswith(b"HTTP/1.1 408 ") or answer == RESET for answer in answers)
        assert sum(answer.startswith(b"HTTP/1.1 408 ") for answer in answers) > CROWD // 2

        # And the gateway serves as before.
        assert statistics.median(await sample(client, url, 10)) <= 2 * baseline + 0.05
    assert "request head not complete" in gateway.log.read_text()


@pytest.mark.timeout(TEST_WITH_A_START_S)
async def test_a_silent_connection_is_closed_by_the_header_timeout(shared_gateway: Gateway) -> None:
    gateway = shared_gateway
    reader, writer = await asyncio.open_connection(gateway.host, gateway.port)
    await assert_closed_with_408(reader, writer, HEADER_TIMEOUT_S)


@pytest.mark.timeout(TEST_WITH_A_START_S)
async def test_a_short_body_under_a_long_content_length_is_closed_by_the_body_timeout(shared_gateway: Gateway) -> None:
    gateway = shared_gateway
    reader, writer = await asyncio.open_connection(gateway.host, gateway.port)
    writer.write(CHAT_HEAD + b"Content-Length: 10000\r\n\r\n" + b'{"id": "' + b"a" * 90)
    await assert_closed_with_408(reader, writer, BODY_TIMEOUT_S)


@pytest.mark.timeout(TEST_WITH_A_START_S)
async def test_a_chunked_body_of_one_byte_every_five_seconds_is_closed(shared_gateway: Gateway) -> None:
    gateway = shared_gateway
    reader, writer = await asyncio.open_connection(gateway.host, gateway.port)
    writer.write(CHAT_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")

    async def drip() -> None:
        while True:
            writer.write(b"1\r\n{\r\n")
            await asyncio.sleep(5)

    dripping = asyncio.create_task(drip())
    try:
        answer = await closed_within(reader, BODY_TIMEOUT_S + SLACK_S)
    finally:
        dripping.cancel()
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408 ")


@pytest.mark.timeout(TEST_WITH_A_START_S)
async def test_a_body_at_the_minimum_rate_may_take_longer_than_the_body_timeout(shared_gateway: Gateway) -> None:
    gateway = shared_gateway
    # 4,000 bytes at 2,000 bytes/s (4x the minimum rate): 2 s, past the 2 s base timeout.
    body = b"[" + b" " * 3998 + b"]"
    reader, writer = await asyncio.open_connection(gateway.host, gateway.port)
    writer.write(CHAT_HEAD + b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    try:
        for offset in range(0, len(body), 200):
            writer.write(body[offset : offset + 200])
            await asyncio.sleep(0.1)
        answer = await closed_within(reader, 20)
    finally:
        writer.close()
    # The app saw the whole body and refused its shape (a list is no chat request).
    assert answer.startswith(b"HTTP/1.1 422 "), answer[:200]


@pytest.mark.timeout(TEST_WITH_A_START_S)
async def test_an_idle_keep_alive_connection_is_closed_by_the_idle_timeout(shared_gateway: Gateway) -> None:
    gateway = shared_gateway
    reader, writer = await asyncio.open_connection(gateway.host, gateway.port)
    writer.write(b"GET /openapi.json HTTP/1.1\r\nHost: gateway\r\n\r\n")
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        assert head.startswith(b"HTTP/1.1 200 ")
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        await asyncio.wait_for(reader.readexactly(length), timeout=10)
        began = time.monotonic()
        assert await closed_within(reader, IDLE_TIMEOUT_S + SLACK_S) == b""
    finally:
        writer.close()
    assert time.monotonic() - began >= IDLE_TIMEOUT_S - 0.5


@pytest.mark.timeout(TEST_WITH_A_START_S)
async def test_past_the_connection_bound_a_new_connection_is_answered_503_with_retry_after(tmp_path: Path) -> None:
    bound = 20
    with gateway_process(tmp_path, POPAGENT_GATEWAY_MAX_CONNECTIONS=str(bound)) as gateway:
        await started(gateway)
        held = [await asyncio.open_connection(gateway.host, gateway.port) for _ in range(bound)]
        try:
            reader, writer = await asyncio.open_connection(gateway.host, gateway.port)
            try:
                answer = await closed_within(reader, 10)
            finally:
                writer.close()
            head = answer.split(b"\r\n\r\n", 1)[0].lower()
            assert head.startswith(b"http/1.1 503 ")
            assert b"\r\nretry-after: 1" in head
        finally:
            for _reader, held_writer in held:
                held_writer.close()
        # Once the held ones are gone, connections are served again.
        async with httpx.AsyncClient(timeout=10) as client:

            async def served() -> bool:
                return (await client.get(f"{gateway.url}/openapi.json")).status_code == 200

            await eventually(served, within=60, interval=0.1, what="the gateway to serve again")
        assert gateway.log.read_text().count("refusing new ones with 503") == 1
