"""Gateway overhead: GET /api/sessions and a session save through the gateway, against the
same calls made directly to agent-runner over gRPC, in the same run.

Real processes: embedded PostgreSQL and NATS, agent-runner, and the gateway (uvicorn,
uvloop, httptools) exactly as `make run` starts them. The bench process is the client:
a minimal keep-alive HTTP/1.1 client on raw asyncio streams (so the client's own
parsing cost does not inflate the gateway's figure) and a grpc.aio stub for the direct
calls. Latency is sequential (one request in flight), direct and gateway calls alternating so
both see the same machine noise; requests/s is also measured with 8 requests in flight. Target: gateway overhead (gateway p50 - direct p50) <= 1 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import uvloop

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_core.credentials import generate_credentials
from popagent_core.grpc_client import check_health, open_channel
from popagent_dev import embedded
from popagent_dev.embedded import ensure_database

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks' shared `bench.helpers`

from bench.helpers.processes import spawn

API_KEY = "bench-api-key-" + "k" * 24
SESSIONS = 50
MESSAGES_PER_SAVE = 10
WARMUP = 300
SAMPLES = 3000
CONCURRENCY = 8


class RawHttp:
    """One keep-alive HTTP/1.1 connection; just enough protocol for JSON requests."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self.reader, self.writer, self.host = reader, writer, host

    @classmethod
    async def connect(cls, host: str, port: int) -> RawHttp:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, f"{host}:{port}")

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = (
            f"{method} {path} HTTP/1.1\r\nhost: {self.host}\r\nx-popagent-key: {API_KEY}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status_line = await self.reader.readline()
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        payload = await self.reader.readexactly(length) if length else b""
        return int(status_line.split()[1]), payload

    def close(self) -> None:
        self.writer.close()


@contextlib.asynccontextmanager
async def processes(data: Path) -> AsyncIterator[tuple[int, str, str]]:
    """(gateway port, agent-runner address, gateway token) of a running pair of services."""
    tokens, callers = generate_credentials()
    runner_address = f"127.0.0.1:{embedded.free_port()}"
    gateway_port = embedded.free_port()
    with embedded.postgres(data / "pg") as admin_dsn, embedded.nats(data / "nats") as nats:
        dsn = await ensure_database(admin_dsn, "popagent_bench")
        (data / "workspace" / "popagent").mkdir(parents=True, exist_ok=True)
        base = {k: v for k, v in os.environ.items() if not k.startswith("POPAGENT_")}
        base |= {
            "DATABASE_URL": dsn,
            "OBSERVABILITY_DATABASE_URL": dsn,
            "NATS_URL": nats.url,
            "POPAGENT_INTERNAL_CALLERS": callers,
            "POPAGENT_AGENT_RUNNER_ADDR": runner_address,
            "POPAGENT_WORKSPACE_ROOT": str(data / "workspace"),
            "POPAGENT_API_KEY": API_KEY,
            "POPAGENT_GATEWAY_PORT": str(gateway_port),
            "POPAGENT_LOG_LEVEL": "WARNING",
        }
        children = [
            spawn(
                "popagent_agent_runner", base | {"POPAGENT_INTERNAL_TOKEN": tokens["agent-runner"]}, data / "runner.log"
            ),
            spawn("popagent_gateway", base | {"POPAGENT_INTERNAL_TOKEN": tokens["gateway"]}, data / "gateway.log"),
        ]
        try:
            async with open_channel(runner_address, "") as channel:
                while not await check_health(channel, timeout_s=0.5):
                    if any(child.poll() is not None for child in children):
                        raise RuntimeError(f"a service died; see {data}/*.log")
                    await asyncio.sleep(0.1)
            while True:
                with contextlib.suppress(OSError):
                    probe = await RawHttp.connect("127.0.0.1", gateway_port)
                    probe.close()
                    break
                await asyncio.sleep(0.05)
            yield gateway_port, runner_address, tokens["gateway"]
        finally:
            for child in children:
                child.terminate()
            for child in children:
                child.wait(10)


def messages(count: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"m{i}",
            "role": "user" if i % 2 == 0 else "assistant",
            "parts": [{"type": "text", "text": f"message {i}: " + "lorem ipsum dolor sit amet " * 8}],
        }
        for i in range(count)
    ]


async def measure(
    direct: Callable[[], Awaitable[None]], gateway: Callable[[], Awaitable[None]]
) -> tuple[list[float], list[float]]:
    """Alternate direct and gateway calls, so both see the same machine noise."""
    for _ in range(WARMUP):
        await direct()
        await gateway()
    direct_samples, gateway_samples = [], []
    for _ in range(SAMPLES):
        started = time.perf_counter()
        await direct()
        middle = time.perf_counter()
        await gateway()
        direct_samples.append(middle - started)
        gateway_samples.append(time.perf_counter() - middle)
    return direct_samples, gateway_samples


async def throughput(calls: list[Callable[[], Awaitable[None]]], seconds: float = 2.0) -> float:
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(call: Callable[[], Awaitable[None]]) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await call()
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(call) for call in calls))
    return done / (time.perf_counter() - started)


def quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(len(ordered) * 0.99)] * 1000


async def run() -> None:
    with tempfile.TemporaryDirectory(prefix="popagent-bench-gateway-") as tmp:
        async with processes(Path(tmp)) as (port, runner_address, token):
            http = await RawHttp.connect("127.0.0.1", port)
            for i in range(SESSIONS):
                status, _ = await http.request(
                    "POST", "/api/sessions", orjson.dumps({"id": f"bench-{i}", "title": f"chat {i}"})
                )
                assert status == 201, status
            body_messages = messages(MESSAGES_PER_SAVE)
            messages_json = orjson.dumps(body_messages)
            revisions: dict[str, int] = {}

            async with open_channel(runner_address, token) as channel:
                stub = agent_runner_pb2_grpc.AgentRunnerStateServiceStub(channel)

                async def direct_list() -> None:
                    response = await stub.ListSessions(pb.ListSessionsRequest(), timeout=10)
                    assert len(response.sessions) == SESSIONS

                def http_list(conn: RawHttp) -> Callable[[], Awaitable[None]]:
                    async def call() -> None:
                        status, payload = await conn.request("GET", "/api/sessions")
                        assert status == 200 and payload.count(b'"id"') == SESSIONS

                    return call

                def direct_save(session_id: str) -> Callable[[], Awaitable[None]]:
                    async def call() -> None:
                        response = await stub.SaveSession(
                            pb.SaveSessionRequest(
                                id=session_id,
                                revision=revisions.get(session_id, 0),
                                messages_json=messages_json,
                                message_count=MESSAGES_PER_SAVE,
                            ),
                            timeout=10,
                        )
                        assert not response.conflict
                        revisions[session_id] = response.session.revision

                    return call

                def http_save(conn: RawHttp, session_id: str) -> Callable[[], Awaitable[None]]:
                    async def call() -> None:
                        body = orjson.dumps({"revision": revisions.get(session_id, 0), "messages": body_messages})
                        status, payload = await conn.request("PUT", f"/api/sessions/{session_id}", body)
                        assert status == 200, payload
                        revisions[session_id] = orjson.loads(payload)["revision"]

                    return call

                async def fresh(count: int) -> list[RawHttp]:
                    # Idle keep-alive connections are closed by the server after 5 s.
                    return [await RawHttp.connect("127.0.0.1", port) for _ in range(count)]

                http.close()
                (http,) = await fresh(1)
                results = {
                    "GET /api/sessions": await measure(direct_list, http_list(http)),
                    "session save (PUT)": await measure(direct_save("bench-0"), http_save(http, "bench-1")),
                }
                http.close()
                direct_list_rate = await throughput([direct_list] * CONCURRENCY)
                connections = await fresh(CONCURRENCY)
                http_list_rate = await throughput([http_list(c) for c in connections])
                direct_save_rate = await throughput([direct_save(f"bench-{i}") for i in range(2, 2 + CONCURRENCY)])
                connections += await fresh(CONCURRENCY)
                http_save_rate = await throughput(
                    [http_save(c, f"bench-{i + 20}") for i, c in enumerate(connections[CONCURRENCY:])]
                )
                rates = {
                    "GET /api/sessions": (direct_list_rate, http_list_rate),
                    "session save (PUT)": (direct_save_rate, http_save_rate),
                }
                for conn in connections:
                    conn.close()

    print(f"{SESSIONS} sessions listed per call; saves carry {MESSAGES_PER_SAVE} messages ({len(messages_json)} bytes)")
    print(f"{SAMPLES} sequential samples after {WARMUP} warm-up; requests/s with {CONCURRENCY} in flight")
    for name, (direct, gateway) in results.items():
        d50, d99 = quantiles(direct)
        g50, g99 = quantiles(gateway)
        direct_rate, gateway_rate = rates[name]
        print(f"{name}:")
        print(
            f"  direct gRPC : p50 {d50:6.3f} ms  p99 {d99:6.3f} ms  {1000 / d50:7.0f} req/s sequential  {direct_rate:7.0f} req/s x{CONCURRENCY}"
        )
        print(
            f"  via gateway : p50 {g50:6.3f} ms  p99 {g99:6.3f} ms  {1000 / g50:7.0f} req/s sequential  {gateway_rate:7.0f} req/s x{CONCURRENCY}"
        )
        print(f"  gateway overhead p50 {g50 - d50:+.3f} ms (target <= 1 ms), p99 {g99 - d99:+.3f} ms")


def main() -> None:
    uvloop.run(run())


if __name__ == "__main__":
    main()
