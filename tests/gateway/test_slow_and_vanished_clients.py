"""RELIABILITY row 12 at CI size, over real sockets to the real `python -m popagent_gateway` process
in front of a scripted agent-runner on real gRPC (bench/slow_clients.py runs the full stack at the
row's scale):

- a slow consumer (one SSE event a second through a 4 KiB receive buffer) of a turn the runner
  produces at 100 events a second, 16 KiB each (12.8 MiB in the window): what the runner sent and
  the client has not received, less what waits in the two sockets' kernel buffers (the gateway's
  send queue grows to the kernel's tcp_wmem limit, 4 MiB by default, whatever the process does),
  stays within 1 MiB per stream: the gateway and the gRPC stream pass the backpressure on to the
  producer instead of buffering the answer;
- 200 clients that vanish with a TCP reset once their first text arrives: within 5 s the gateway's
  open file descriptors and threads are back to their baseline within 5, and every upstream turn
  call it made was cancelled (none left running on the runner).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
import struct
import subprocess
import sys
import termios
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
import orjson
import psutil
import pytest

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_core.auth import CallerRegistry
from popagent_core.grpc_server import create_server, running
from popagent_dev.embedded import free_port, terminate
from support.waiting import START_WITHIN_S, eventually

from .harness import API_KEY, ScriptedState, batch, start

EVENT_BYTES = 16 * 1024
EVENTS_PER_S = 100
SLOW_READ_S = 8.0
MAX_BUFFERED = 1024 * 1024
DISCONNECTS = 200

pytestmark = pytest.mark.timeout(120)


@dataclass
class EndlessRunner(agent_runner_pb2_grpc.AgentRunnerServiceServicer):
    """Every turn streams 1 KiB text deltas at 100 a second until its call is cancelled; it counts
    what it sent per session and the calls still running."""

    sent: dict[str, int] = field(default_factory=dict)
    live: int = 0
    started: int = 0

    async def Chat(self, request: pb.ChatRequest, context: grpc.aio.ServicerContext):  # type: ignore[override]
        self.live += 1
        self.started += 1
        try:
            yield batch(start(), pb.TurnEvent(text_start=pb.PartBoundary(part_id="t1")))
            delta = "x" * EVENT_BYTES
            next_at = time.monotonic()
            while True:
                next_at += 1 / EVENTS_PER_S
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                yield batch(pb.TurnEvent(text_delta=pb.TextDelta(part_id="t1", delta=delta)))
                self.sent[request.session_id] = self.sent.get(request.session_id, 0) + 1
        finally:
            self.live -= 1


@dataclass
class Gateway:
    port: int
    process: subprocess.Popen[bytes]
    runner: EndlessRunner


@contextlib.contextmanager
def gateway_process(tmp_path: Path, token: str, runner_address: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """`python -m popagent_gateway` in front of `runner_address`, and its port."""
    port = free_port()
    environment = os.environ | {
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "OBSERVABILITY_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "POPAGENT_API_KEY": API_KEY,
        "POPAGENT_INTERNAL_TOKEN": token,
        "POPAGENT_AGENT_RUNNER_ADDR": runner_address,
        "POPAGENT_GATEWAY_PORT": str(port),
        "POPAGENT_UI_DIR": "/nonexistent/popagent-ui",
    }
    with (tmp_path / "gateway.log").open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "popagent_gateway"], env=environment, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield process, port
    finally:
        terminate(process, 15)


@pytest.fixture
async def gateway(tmp_path: Path, internal_credentials: tuple[dict[str, str], str]) -> AsyncIterator[Gateway]:
    tokens, callers = internal_credentials
    runner = EndlessRunner()
    server, health = create_server(CallerRegistry.from_json(callers))
    agent_runner_pb2_grpc.add_AgentRunnerServiceServicer_to_server(runner, server)
    agent_runner_pb2_grpc.add_AgentRunnerStateServiceServicer_to_server(ScriptedState(), server)
    address = f"127.0.0.1:{free_port()}"
    async with running(server, health, address):
        with gateway_process(tmp_path, tokens["gateway"], address) as (process, port):
            async with httpx.AsyncClient(timeout=30) as client:

                async def answers() -> bool:
                    try:
                        return (await client.get(f"http://127.0.0.1:{port}/openapi.json")).status_code == 200
                    except httpx.TransportError:
                        return False

                await eventually(answers, within=START_WITHIN_S, interval=0.1, what="the gateway to answer")
            yield Gateway(port, process, runner)


def chat_request(port: int, session: str) -> bytes:
    message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "go"}]}
    body = orjson.dumps({"id": session, "model": "fake/fake-chat", "message": message})
    head = (
        f"POST /api/chat HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nx-popagent-key: {API_KEY}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def send_queue(local_port: int, remote_port: int) -> int:
    """Bytes waiting in the kernel's send queue of the loopback TCP connection local -> remote
    (/proc/net/tcp's tx_queue: any process's sockets of this network namespace)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1].split(":")[1], fields[2].split(":")[1]
        if int(local, 16) == local_port and int(remote, 16) == remote_port:
            return int(fields[4].split(":")[0], 16)
    raise LookupError(f"no TCP connection {local_port} -> {remote_port}")


@dataclass
class SlowStream:
    session: str
    received: int = 0  # bytes taken off the socket so far
    deltas: int = 0  # text-delta events consumed
    # What the runner sent that is neither received nor in either socket's kernel buffer.
    held_by_processes: int = 0


async def slow_reader(port: int, stream: SlowStream, runner: EndlessRunner, seconds: float) -> None:
    """Read one SSE event a second through a 4 KiB receive buffer for `seconds`, then measure what
    the stream holds between the runner and the client, outside the two sockets' kernel buffers."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    held = b""
    wire_bytes = 0  # one text-delta event as the gateway writes it
    try:
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, chat_request(port, stream.session))
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            while b"\n\n" not in held:
                data = await loop.sock_recv(sock, 512)
                assert data, "the gateway ended the slow stream"
                stream.received += len(data)
                held += data
            event, held = held.split(b"\n\n", 1)
            if b'"text-delta"' in event:
                stream.deltas += 1
                wire_bytes = len(event) + 2
            await asyncio.sleep(1)
        # One instant: nothing else of this event loop, the runner included, runs meanwhile.
        unread = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]
        in_kernel = send_queue(port, sock.getsockname()[1]) + unread
        sent = runner.sent.get(stream.session, 0) * wire_bytes
        stream.held_by_processes = sent - stream.received - in_kernel
    finally:
        sock.close()


async def test_a_slow_consumer_holds_at_most_a_mebibyte_between_runner_and_client(gateway: Gateway) -> None:
    streams = [SlowStream(f"slow-{n}") for n in range(3)]
    await asyncio.gather(*(slow_reader(gateway.port, s, gateway.runner, SLOW_READ_S) for s in streams))
    for stream in streams:
        assert stream.deltas >= 3
        # Unthrottled, the runner would have sent all 800 events (12.8 MiB), past the kernel's 4 MiB.
        held_mib = stream.held_by_processes / 2**20
        sent = gateway.runner.sent.get(stream.session)
        assert stream.held_by_processes <= MAX_BUFFERED, f"{stream.session}: {sent} sent, {held_mib:.2f} MiB held"
    await eventually(lambda: gateway.runner.live == 0, within=5, what="the slow streams' calls to end")


async def reset_after_first_text(port: int, session: str) -> None:
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    try:
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, chat_request(port, session))
        seen = b""
        while b'"text-delta"' not in seen:
            data = await loop.sock_recv(sock, 65536)
            assert data, "the gateway ended the stream before its first text"
            seen = seen[-64:] + data
    finally:
        sock.close()  # SO_LINGER 0: the close is a reset


async def test_two_hundred_vanished_clients_leave_no_descriptor_thread_or_upstream_call(gateway: Gateway) -> None:
    process = psutil.Process(gateway.process.pid)
    # One full turn first, so what the first request opens for good (pools, channels) is in the baseline.
    await reset_after_first_text(gateway.port, "warm-up")
    await eventually(lambda: gateway.runner.live == 0, within=5, what="the warm-up call to end")
    fds, threads = process.num_fds(), process.num_threads()
    for offset in range(0, DISCONNECTS, 50):
        await asyncio.gather(*(reset_after_first_text(gateway.port, f"gone-{n}") for n in range(offset, offset + 50)))
    assert gateway.runner.started == DISCONNECTS + 1

    def settled() -> bool:
        return gateway.runner.live == 0 and process.num_fds() <= fds + 5 and process.num_threads() <= threads + 5

    await eventually(settled, within=5, interval=0.1, what="the gateway back to its baseline")
