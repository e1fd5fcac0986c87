"""Chat through the whole stack against streaming straight from the same scripted model server, same run.

Real processes, as `make run` starts them: embedded PostgreSQL and NATS, the hooks service (no
hooks configured), agent-runner as its worker processes (`--runner-workers`, by default as many as
`make run` starts; its chat turn on the lean model, `NINEROUTER_URL` pointing at the scripted
server) and the gateway (uvicorn, uvloop, httptools), plus the scripted model server
(tests/support/model_gateway.py) as its own process answering every request with the same streamed
text. The bench process is the client for both paths, with the same code:

- direct: `POST /v1/chat/completions` (stream) to the model server;
- stack: `POST /api/chat` to the gateway (session, newest message), read as the AI SDK stream.

Time to first token is request sent -> first text byte received (a `content` delta direct, a
`text-delta` chunk through the stack); tokens/s is the scripted chunks of all turns divided by
wall time. At each level, `N` chats are in flight at once, each running turns back to back
(starts spread over one stream's duration, so the level measures steady state, not one burst
of simultaneous starts). Each chat keeps its session, so the thread history the runner loads
and the model gets grows turn by turn, as in real use. The client is a minimal HTTP/1.1 reader on
asyncio streams, so its own CPU (it shares the machine's cores) stays small for both paths. At
each concurrency the CPU each process spent per streamed chunk is printed too (docs/decisions/lean-model-transport.md),
PostgreSQL's (server and backends) and NATS's included; at one chat those figures are mostly the
processes' idle background work (and /proc's 10 ms resolution), at fifty they are the streaming
cost. For the stack, the time to the response head
(the gateway answers once the runner's first batch, `start`, arrived) is printed as well, traced and
untraced: whether tracing's cost lies before the runner's turn starts or in it.
Targets (`TARGETS`), each printed with ok or MISSED: unpaced, a turn at most 1.5x direct's at 1 and 20
chats, and at most +5 ms (1 chat) and +20 ms (20 chats) to the first token; paced, a turn at most
+10 ms at 1 chat, at most 1.10x and +25 ms to the first token at 20 chats.

`--smoke` (`make bench-smoke`, under two minutes): one traced stack per pacing (unpaced, and paced as
a model that answers after 50 ms and then sends a chunk every 2 ms), 1 and 20 chats against direct,
every target printed; it exits 1 when a figure is worse than twice its target.

Tracing: the same run starts two pairs of stacks, each pair a traced one, which exports every span
to its own observability database as in production, and one with `OTEL_SDK_DISABLED=true` (no tracer
provider, tracing middleware or interceptors, no span export, no stored logs). They start traced,
untraced, untraced, traced: in A/A runs the stack started first ran ~2 ms slower at one chat, and
the two pairs put the start order on both sides (an A/A run of this design still showed +2 ms in the
one-chat paired median and none at ten chats, so read one-chat figures against an A/A run). Each
level alternates traced and untraced (turn by turn at one chat, where the median of each traced turn
minus the untraced turn next to it, on the same pair, is printed too; in blocks of two turns per
chat above, where the median of the blocks' p50 differences is printed too), block by block on the
other pair. Every stack places its chats on its agent-runner workers alike (chat n on worker n %
workers). Tracing's CPU per turn is the difference of the stacks' CPU per chunk (PostgreSQL's and
NATS's included) times a turn's chunks.
Targets for the cost of tracing: time to first token +<= 1 ms p50, stream throughput at most 3 % lower.
`--untraced-twice` runs the same comparison with every stack untraced (an A/A run): what it
prints as tracing's cost is the stacks' own difference, the noise a real figure must exceed.
`--sample-ratio R` has the traced stacks record a share R of the traces (OTEL_TRACES_SAMPLER): with 0,
what it prints as tracing's cost is what an unsampled turn costs against tracing off.

    .venv/bin/python bench/chat.py [--chunks 200] [--chunk-delay-ms 5] [--rounds 4] [--levels 1,50]
                                   [--runner-workers N] [--untraced-twice] [--sample-ratio R]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import psutil
import uvloop

from popagent_core.credentials import generate_credentials
from popagent_core.grpc_client import check_health, open_channel
from popagent_dev import embedded
from popagent_dev.embedded import ensure_database
from popagent_dev.launcher import default_runner_workers
from popagent_gateway.runners import rendezvous

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the benchmarks' shared `bench.helpers` (`python -P` leaves bench/ off the path)

from bench.helpers.completions import streamed_go  # noqa: E402
from bench.helpers.processes import spawn  # noqa: E402

API_KEY = "bench-api-key-" + "k" * 24
MODEL_KEY = "sk-bench"
MODEL = "fake/fake-chat"
CHUNK_CHARS = 4


# The scripted server binds its listening socket with proto 0, and asyncio sets TCP_NODELAY only on
# sockets whose proto is IPPROTO_TCP: a response's first body write then waits for the delayed ACK of
# its headers (40 ms on a reused connection), which no real model gateway does (Node, 9Router's
# runtime, sets noDelay). The bench runs the same server with TCP sockets marked as such.
SERVE_WITH_NODELAY = """
import socket, sys

class TcpSocket(socket.socket):
    def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
        if fileno is None and family == socket.AF_INET and type == socket.SOCK_STREAM and proto in (-1, 0):
            proto = socket.IPPROTO_TCP
        super().__init__(family, type, proto, fileno)

socket.socket = TcpSocket
from support.model_gateway import main
main(sys.argv[1:])
"""


@dataclass
class Turn:
    head: float
    ttft: float
    seconds: float


# Processes whose CPU is counted with their children's (PostgreSQL's postmaster: its backends).
SERVER_GROUPS: set[int] = set()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (from /proc); PostgreSQL's with its backends'."""
    if pid in SERVER_GROUPS:
        return sum(own_cpu_seconds(p) for p in [pid, *(child.pid for child in psutil.Process(pid).children())])
    return own_cpu_seconds(pid)


def own_cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0  # a backend that ended between the listing and the read
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postmaster_pid(data_dir: Path) -> int:
    """The embedded PostgreSQL server's pid, from its data folder's postmaster.pid."""
    return int((data_dir / "postmaster.pid").read_text().split()[0])


@contextlib.asynccontextmanager
async def model_server(
    chunks: int, chunk_delay_s: float, first_byte_delay_s: float = 0.0
) -> AsyncIterator[tuple[str, int]]:
    """(url, pid) of the scripted server answering one streamed text of `chunks` chunks, forever."""
    text = "".join(f"{n % 1000:03d} " for n in range(chunks))
    turn = {
        "text": text,
        "chunk_size": CHUNK_CHARS,
        "chunk_delay_s": chunk_delay_s,
        "first_byte_delay_s": first_byte_delay_s,
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as script:
        # The catalog lists the seeded default and the specialists' override too, as 9Router does:
        # the gateway refuses a chat whose agents would run on a model the catalog lacks.
        models = [{"id": MODEL}, {"id": "cx/gpt-5.3-codex"}, {"id": "cx/gpt-5.3-codex-spark"}]
        json.dump({"turns": [turn], "loop": True, "api_key": MODEL_KEY, "models": models}, script)
    port = embedded.free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests")}
    command = [sys.executable, "-c", SERVE_WITH_NODELAY, "--port", str(port), "--script", script.name]
    process = await asyncio.create_subprocess_exec(
        *embedded.orphan_safe([*command, "--no-record"]), env=env, stdout=subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        line = (await process.stdout.readline()).decode()
        if "listening on" not in line:
            raise RuntimeError(f"model server did not start: {line!r}")
        yield line.rsplit(" ", 1)[-1].strip(), process.pid
    finally:
        process.terminate()
        await process.wait()
        os.unlink(script.name)


def runner_address(pid: int) -> str:
    """The gRPC address an agent-runner process listens on (its POPAGENT_AGENT_RUNNER_ADDR)."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    [address] = [item.split(b"=", 1)[1].decode() for item in environ if item.startswith(b"POPAGENT_AGENT_RUNNER_ADDR=")]
    return address


@contextlib.asynccontextmanager
async def stack(
    data: Path,
    model_url: str,
    runner_workers: int,
    *,
    tracing: bool = True,
    runner_env: dict[str, str] | None = None,
    sample_ratio: float | None = None,
) -> AsyncIterator[tuple[str, dict[str, int]]]:
    """(gateway url, pid by process) of hooks, agent-runner's workers and the gateway on embedded PostgreSQL and
    NATS (their pids too: PostgreSQL's CPU is its server's and its backends'). `tracing=False`: OTEL_SDK_DISABLED.
    `runner_env`: more settings for every agent-runner worker. `sample_ratio`: the share of traces recorded
    (OTEL_TRACES_SAMPLER=parentbased_traceidratio), every trace when None."""
    tokens, callers = generate_credentials()
    runners = [f"127.0.0.1:{embedded.free_port()}" for _ in range(runner_workers)]
    addresses = {"hooks": f"127.0.0.1:{embedded.free_port()}"} | {
        f"agent-runner-{number}": address for number, address in enumerate(runners, start=1)
    }
    gateway_port = embedded.free_port()
    unused = f"127.0.0.1:{embedded.free_port()}"
    with embedded.postgres(data / "pg") as admin_dsn, embedded.nats(data / "nats") as nats:
        dsn = await ensure_database(admin_dsn, f"popagent_bench_{uuid.uuid4().hex[:8]}")
        # Its own database, as in production: observability writes never go to the application store.
        observability_dsn = await ensure_database(admin_dsn, f"popagent_bench_obs_{uuid.uuid4().hex[:8]}")
        (data / "workspace" / "popagent").mkdir(parents=True, exist_ok=True)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("POPAGENT_", "NINEROUTER_", "OTEL_"))}
        if not tracing:
            base["OTEL_SDK_DISABLED"] = "true"
        elif sample_ratio is not None:
            base |= {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": str(sample_ratio)}
        base |= {
            "DATABASE_URL": dsn,
            "OBSERVABILITY_DATABASE_URL": observability_dsn,
            "NATS_URL": nats.url,
            "NINEROUTER_URL": model_url,
            "NINEROUTER_API_KEY": MODEL_KEY,
            "POPAGENT_INTERNAL_CALLERS": callers,
            "POPAGENT_AGENT_RUNNER_ADDR": ",".join(runners),
            "POPAGENT_HOOKS_ADDR": addresses["hooks"],
            "POPAGENT_BROWSER_BRIDGE_ADDR": unused,
            "POPAGENT_EVOLUTION_ADDR": unused,
            "POPAGENT_TASKS_ADDR": unused,
            "POPAGENT_SECRETS_ADDR": unused,
            "POPAGENT_WORKSPACE_ROOT": str(data / "workspace"),
            "POPAGENT_API_KEY": API_KEY,
            "POPAGENT_GATEWAY_PORT": str(gateway_port),
            "POPAGENT_LOG_LEVEL": "WARNING",
        }
        children = {
            "hooks": spawn("popagent_hooks", base | {"POPAGENT_INTERNAL_TOKEN": tokens["hooks"]}, data / "hooks.log")
        }
        for number, address in enumerate(runners, start=1):
            worker = {
                "POPAGENT_INTERNAL_TOKEN": tokens["agent-runner"],
                "POPAGENT_AGENT_RUNNER_ADDR": address,
                **(runner_env or {}),
            }
            children[f"agent-runner-{number}"] = spawn(
                "popagent_agent_runner", base | worker, data / f"runner-{number}.log"
            )
        children["gateway"] = spawn(
            "popagent_gateway", base | {"POPAGENT_INTERNAL_TOKEN": tokens["gateway"]}, data / "gateway.log"
        )
        try:
            for name, address in addresses.items():
                async with open_channel(address, "") as channel:
                    while not await check_health(channel, timeout_s=0.5):
                        if any(child.poll() is not None for child in children.values()):
                            raise RuntimeError(f"{name} or another service died; see {data}/*.log")
                        await asyncio.sleep(0.1)
            url = f"http://127.0.0.1:{gateway_port}"
            async with httpx.AsyncClient() as probe:
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        if (await probe.get(f"{url}/api/health", headers={"x-popagent-key": API_KEY})).status_code:
                            break
                    await asyncio.sleep(0.05)
            postmaster = postmaster_pid(next((data / "pg").rglob("postmaster.pid")).parent)
            SERVER_GROUPS.add(postmaster)
            infra = {"postgres": postmaster, "nats": nats.process.pid}
            yield url, {name: child.pid for name, child in children.items()} | infra
        finally:
            for child in children.values():
                child.terminate()
            for child in children.values():
                child.wait(10)


class RawStream:
    """One keep-alive HTTP/1.1 connection for streamed POSTs, read with the least client CPU.

    The bench client shares the machine's cores with the stack; httpx spends ~90 µs of CPU per
    streamed chunk, which would be charged to whichever path runs more processes. This reads
    chunked bodies straight off an asyncio stream (as bench/gateway.py's client does).
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self.reader, self.writer, self.host = reader, writer, host

    @classmethod
    async def connect(cls, url: str) -> RawStream:
        host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer, f"{host}:{port}")

    async def post(self, path: str, body: bytes, headers: dict[str, str], marker: bytes) -> Turn:
        """Send one streamed request; time to the first body byte holding `marker`, and to the end."""
        head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        request = (f"POST {path} HTTP/1.1\r\nhost: {self.host}\r\n{head}content-length: {len(body)}\r\n\r\n").encode()
        started = time.perf_counter()
        self.writer.write(request + body)
        status_line = await self.reader.readline()
        if not status_line:
            # The server closed the idle connection (keep-alive timeout): reconnect and resend.
            self.writer.close()
            self.reader, self.writer = await asyncio.open_connection(*self.host.split(":"))
            started = time.perf_counter()
            self.writer.write(request + body)
            status_line = await self.reader.readline()
        head = time.perf_counter() - started
        status = int(status_line.split()[1])
        chunked, length = False, 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"content-length":
                length = int(value)
        if not chunked:
            payload = await self.reader.readexactly(length)
            raise RuntimeError(f"{path} answered {status}: {payload[:300]!r}")
        first = 0.0
        tail = b""
        while True:
            size = int((await self.reader.readline()).split(b";")[0], 16)
            data = await self.reader.readexactly(size + 2)
            if size == 0:
                break
            if not first:
                # The marker may straddle two chunks: look at the end of the previous one too.
                if marker in tail + data:
                    first = time.perf_counter()
                tail = data[-len(marker) - 2 :]
        if status != 200 or not first:
            raise RuntimeError(f"{path} answered {status} without text")
        return Turn(head, first - started, time.perf_counter() - started)


class Connections:
    """One connection per concurrent chat and target, kept across rounds."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pool: list[RawStream] = []
        self._lock = asyncio.Lock()

    async def get(self, index: int) -> RawStream:
        async with self._lock:
            while len(self.pool) <= index:
                self.pool.append(await RawStream.connect(self.url))
        return self.pool[index]


def direct_turn(model_url: str) -> Callable[[int], Awaitable[Turn]]:
    body = streamed_go(MODEL)
    headers = {"authorization": f"Bearer {MODEL_KEY}", "content-type": "application/json"}
    connections = Connections(model_url)
    path = model_url.split("//", 1)[1].split("/", 1)[1]

    async def turn(index: int) -> Turn:
        connection = await connections.get(index)
        return await connection.post(f"/{path}/chat/completions", body, headers, b'"content":"')

    return turn


def stack_turn(url: str, sessions: list[str]) -> Callable[[int], Awaitable[Turn]]:
    headers = {"x-popagent-key": API_KEY, "content-type": "application/json"}
    connections = Connections(url)

    async def turn(index: int) -> Turn:
        message = {"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": "Go"}]}
        body = orjson.dumps({"id": sessions[index], "model": MODEL, "message": message})
        connection = await connections.get(index)
        return await connection.post("/api/chat", body, headers, b'"type":"text-delta"')

    return turn


@dataclass
class Level:
    turns: list[Turn]
    wall: float
    cpu: dict[str, float]


async def run_level(
    turn: Callable[[int], Awaitable[Turn]], concurrency: int, turns_each: int, stream_s: float, pids: dict[str, int]
) -> Level:
    """`concurrency` chats in flight: each worker runs `turns_each` turns back to back.

    Workers start spread over one stream's duration, so the level is in steady state (as many
    chats streaming at once as asked) rather than one burst of simultaneous starts.
    """
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    turns: list[Turn] = []

    async def worker(index: int) -> None:
        await asyncio.sleep(stream_s * index / concurrency)
        for _ in range(turns_each):
            turns.append(await turn(index))

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    wall = time.perf_counter() - started
    cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
    return Level(turns, wall, cpu)


def p50_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


# The chat path's targets against direct, by (paced, concurrent chats): (figure, unit, target). "total"
# is a turn's duration (p50), as a ratio ("x") or as the time added ("ms"); "first token" is the time
# added to the first text (p50).
TARGETS: dict[tuple[bool, int], list[tuple[str, str, float]]] = {
    (False, 1): [("total", "x", 1.5), ("first token", "ms", 5.0)],
    (False, 20): [("total", "x", 1.5), ("first token", "ms", 20.0)],
    (True, 1): [("total", "ms", 10.0)],
    (True, 20): [("total", "x", 1.10), ("first token", "ms", 25.0)],
}


@dataclass
class Verdict:
    figure: str
    value: float
    target: float
    unit: str

    @property
    def ok(self) -> bool:
        return self.value <= self.target

    @property
    def past_twice_the_target(self) -> bool:
        """What the smoke run fails on: a regression, not the distance still to go."""
        return self.value > 2 * self.target

    def line(self) -> str:
        sign = "+" if self.unit == "ms" else ""
        shown = f"{self.value:{sign}.2f} {self.unit}" if self.unit == "ms" else f"{self.value:.2f}x"
        target = f"{sign}{self.target:g} ms" if self.unit == "ms" else f"{self.target:g}x"
        return f"  {self.figure:<34} {shown:>11}  (target <= {target}: {'ok' if self.ok else 'MISSED'})"


def verdicts(paced: bool, concurrency: int, direct: list[Turn], through: list[Turn]) -> list[Verdict]:
    """The targets for this pacing and level (none for other levels), judged on the turns' p50s."""
    pace = "paced" if paced else "unpaced"
    chats = f"{concurrency} chat{'s' if concurrency > 1 else ''}"
    found = []
    for figure, unit, target in TARGETS.get((paced, concurrency), []):
        if figure == "total":
            stack_s, direct_s = p50_ms([t.seconds for t in through]), p50_ms([t.seconds for t in direct])
            value = stack_s / direct_s if unit == "x" else stack_s - direct_s
        else:
            value = p50_ms([t.ttft for t in through]) - p50_ms([t.ttft for t in direct])
        found.append(Verdict(f"{figure}, {chats}, {pace}", value, target, unit))
    return found


async def run(
    chunks: int,
    chunk_delay_s: float,
    rounds: int,
    levels: list[int],
    runner_workers: int,
    same_twice: bool,
    sample_ratio: float | None,
) -> None:
    with tempfile.TemporaryDirectory(prefix="popagent-bench-chat-") as tmp:
        async with contextlib.AsyncExitStack() as stacks:
            model_url, model_pid = await stacks.enter_async_context(model_server(chunks, chunk_delay_s))
            extra_pids = {"model-server": model_pid, "bench-client": os.getpid()}

            async def started(name: str, tracing: bool) -> tuple[str, dict[str, int]]:
                url, pids = await stacks.enter_async_context(
                    stack(
                        Path(tmp) / name,
                        model_url,
                        runner_workers,
                        tracing=tracing and not same_twice,
                        sample_ratio=sample_ratio,
                    )
                )
                return url, pids | extra_pids

            # Two pairs, started traced, untraced, untraced, traced: with tracing off on both, the stack
            # started first ran ~2 ms slower at one chat (A/A runs); the pairs put that on both sides.
            first_traced = await started("traced-1", True)
            first_untraced = await started("untraced-1", False)
            second_untraced = await started("untraced-2", False)
            second_traced = await started("traced-2", True)

            async def sessions_of(gateway: str, pids: dict[str, int]) -> list[str]:
                """`max(levels)` sessions, the n-th on worker n % workers: the gateway places a session by
                its id's hash over the runners' addresses, and two stacks whose chats split 7:3 and 5:5
                over their workers would differ by that split, not by tracing. Sessions that would
                unbalance it are left unused."""
                workers = [
                    runner_address(pid) for name, pid in sorted(pids.items()) if name.startswith("agent-runner-")
                ]
                by_worker: list[list[str]] = [[] for _ in range(runner_workers)]
                wanted = [len(range(worker, max(levels), runner_workers)) for worker in range(runner_workers)]
                async with httpx.AsyncClient(timeout=30) as client:
                    while any(len(ids) < want for ids, want in zip(by_worker, wanted, strict=True)):
                        created = await client.post(
                            f"{gateway}/api/sessions", json={"title": "bench"}, headers={"x-popagent-key": API_KEY}
                        )
                        created.raise_for_status()
                        session_id = created.json()["id"]
                        by_worker[workers.index(rendezvous(session_id, workers)[0])].append(session_id)
                return [by_worker[n % runner_workers][n // runner_workers] for n in range(max(levels))]

            async def path(url: str, pids: dict[str, int]) -> tuple[Callable[[int], Awaitable[Turn]], dict[str, int]]:
                return stack_turn(url, await sessions_of(url, pids)), pids

            pairs = [
                {"stack": await path(*first_traced), "untraced": await path(*first_untraced)},
                {"stack": await path(*second_traced), "untraced": await path(*second_untraced)},
            ]
            direct = direct_turn(model_url)
            stream_s = chunks * chunk_delay_s
            # Warm every path (connections, caches, the hooks digest, code paths).
            # The direct path's CPU figures are the first traced stack's (its processes idle meanwhile).
            await run_level(direct, max(levels), 2, stream_s, first_traced[1])
            for pair in pairs:
                for turn, pids in pair.values():
                    await run_level(turn, max(levels), 2, stream_s, pids)
            print(
                f"chat bench: {chunks} chunks of {CHUNK_CHARS} characters per turn, "
                f"{chunk_delay_s * 1000:g} ms between chunks, {rounds} turns per chat and level, "
                f"agent-runner as {runner_workers} worker{'s' if runner_workers > 1 else ''}\n"
            )
            for concurrency in levels:
                # At least 20 turns per path and level, so a p50 means something at low concurrency.
                turns_each = max(rounds, -(-20 // concurrency))
                # Traced and untraced alternate in blocks (ABBA, so a drift of the machine or of the
                # growing histories weighs on both alike), each block on the other pair of stacks:
                # turn by turn at one chat, two turns per chat above (an even count of blocks), where each
                # block starts its chats spread over a stream (direct runs in the same blocks). Many short
                # blocks rather than two halves: how the chats' turns happen to line up (several starting
                # at once) moves a block's p50 by several ms, and more blocks average it.
                blocks = turns_each if concurrency == 1 else max(2, turns_each // 4 * 2)
                shares = [turns_each // blocks + (1 if block < turns_each % blocks else 0) for block in range(blocks)]
                results: dict[str, list[Level]] = {
                    "direct": [
                        await run_level(direct, concurrency, share, stream_s, first_traced[1]) for share in shares
                    ],
                    "stack": [],
                    "untraced": [],
                }
                for block, share in enumerate(shares):
                    order = ("stack", "untraced") if block % 4 in (0, 3) else ("untraced", "stack")
                    for name in order:
                        turn, pids = pairs[block % 2][name]
                        results[name].append(await run_level(turn, concurrency, share, stream_s, pids))
                report(concurrency, chunks, results, paced=chunk_delay_s > 0)


def report(concurrency: int, chunks: int, results: dict[str, list[Level]], paced: bool) -> None:
    summary: dict[str, dict[str, float]] = {}
    for name, levels in results.items():
        ttfts = [t.ttft for level in levels for t in level.turns]
        total_chunks = chunks * sum(len(level.turns) for level in levels)
        wall = sum(level.wall for level in levels)
        cpu = {process: sum(level.cpu[process] for level in levels) for process in levels[0].cpu}
        summary[name] = {
            "head_p50": p50_ms([t.head for level in levels for t in level.turns]),
            "ttft_p50": p50_ms(ttfts),
            "ttft_p90": sorted(ttfts)[int(len(ttfts) * 0.9)] * 1000,
            "tokens_per_s": total_chunks / wall,
            **{f"cpu_us:{process}": seconds / total_chunks * 1e6 for process, seconds in cpu.items()},
        }
    direct, through, untraced = summary["direct"], summary["stack"], summary["untraced"]
    added = through["ttft_p50"] - direct["ttft_p50"]
    ratio = through["tokens_per_s"] / direct["tokens_per_s"]
    print(
        f"concurrent chats: {concurrency}  (stack: response head p50 {through['head_p50']:.2f} ms,"
        f" untraced {untraced['head_p50']:.2f} ms)"
    )
    for name in ("direct", "stack", "untraced"):
        row = summary[name]
        print(
            f"  {name:<8} time to first token p50 {row['ttft_p50']:7.2f} ms  p90 {row['ttft_p90']:7.2f} ms   "
            f"{row['tokens_per_s']:9.0f} tokens/s"
        )
    print(f"  added time to first token (p50): {added:+.2f} ms, stack throughput / direct: {ratio:.1%}")
    direct_turns = [t for level in results["direct"] for t in level.turns]
    stack_turns = [t for level in results["stack"] for t in level.turns]
    print(
        f"  turn p50: direct {p50_ms([t.seconds for t in direct_turns]):.2f} ms,"
        f" stack {p50_ms([t.seconds for t in stack_turns]):.2f} ms"
    )
    for verdict in verdicts(paced, concurrency, direct_turns, stack_turns):
        print(verdict.line())
    tracing_ttft = through["ttft_p50"] - untraced["ttft_p50"]
    tracing_ratio = through["tokens_per_s"] / untraced["tokens_per_s"]
    print(
        f"  tracing on vs off: time to first token (p50) {tracing_ttft:+.2f} ms"
        f"  (target <= +1 ms: {'ok' if tracing_ttft <= 1 else 'MISSED'}),"
        f" throughput {tracing_ratio:.1%}  (target >= 97%: {'ok' if tracing_ratio >= 0.97 else 'MISSED'})"
    )
    if concurrency == 1:
        # Each traced turn against the untraced turn run next to it: the two stacks' own spread
        # (±2.5 ms between p50s of separate runs) mostly cancels in the pairs.
        pairs = [
            traced.turns[0].ttft - plain.turns[0].ttft
            for traced, plain in zip(results["stack"], results["untraced"], strict=True)
        ]
        print(f"  tracing on vs off, median of {len(pairs)} paired turns: {p50_ms(pairs):+.2f} ms")
    else:
        pairs = [
            p50_ms([t.ttft for t in traced.turns]) - p50_ms([t.ttft for t in plain.turns])
            for traced, plain in zip(results["stack"], results["untraced"], strict=True)
        ]
        print(
            f"  tracing on vs off, median of {len(pairs)} blocks' p50 differences: {statistics.median(pairs):+.2f} ms"
            f"  ({' '.join(f'{d:+.1f}' for d in pairs)})"
        )
    stack_cpu = sum(v for k, v in through.items() if k.startswith("cpu_us:") and "model" not in k and "bench" not in k)
    untraced_cpu = sum(
        v for k, v in untraced.items() if k.startswith("cpu_us:") and "model" not in k and "bench" not in k
    )
    print(f"  tracing's CPU per turn, all stack processes: {(stack_cpu - untraced_cpu) * chunks / 1000:+.2f} ms")
    processes = [key.split(":", 1)[1] for key in through if key.startswith("cpu_us:")]
    print("  CPU per streamed chunk, µs (stack run, tracing on | tracing off; direct run in brackets):")
    for process in processes:
        print(
            f"    {process:<15} {through['cpu_us:' + process]:7.1f} | {untraced['cpu_us:' + process]:7.1f}"
            f"   [{direct['cpu_us:' + process]:6.1f}]"
        )
    print()


SMOKE_LEVELS = (1, 20)
SMOKE_PACING = {False: (0.0, 0.0), True: (0.002, 0.05)}  # paced: (between chunks, before the first), s


async def smoke(chunks: int, runner_workers: int) -> list[Verdict]:
    """Every target at 1 and 20 chats, unpaced and paced, one traced stack each; direct and stack
    alternate in blocks so a drift of the machine weighs on both."""
    found: list[Verdict] = []
    for paced, (chunk_delay_s, first_byte_delay_s) in SMOKE_PACING.items():
        with tempfile.TemporaryDirectory(prefix="popagent-bench-smoke-") as tmp:
            async with contextlib.AsyncExitStack() as stacks:
                model_url, model_pid = await stacks.enter_async_context(
                    model_server(chunks, chunk_delay_s, first_byte_delay_s)
                )
                url, pids = await stacks.enter_async_context(stack(Path(tmp) / "smoke", model_url, runner_workers))
                pids |= {"model-server": model_pid}
                async with httpx.AsyncClient(timeout=30) as client:
                    sessions = []
                    for _ in range(max(SMOKE_LEVELS)):
                        created = await client.post(
                            f"{url}/api/sessions", json={"title": "bench"}, headers={"x-popagent-key": API_KEY}
                        )
                        created.raise_for_status()
                        sessions.append(created.json()["id"])
                paths = {"direct": direct_turn(model_url), "stack": stack_turn(url, sessions)}
                stream_s = chunks * chunk_delay_s + first_byte_delay_s
                for turn in paths.values():
                    await run_level(turn, max(SMOKE_LEVELS), 2, stream_s, pids)
                for concurrency in SMOKE_LEVELS:
                    turns: dict[str, list[Turn]] = {"direct": [], "stack": []}
                    for block in range(4):
                        order = ("direct", "stack") if block % 2 == 0 else ("stack", "direct")
                        for name in order:
                            each = max(1, 5 // concurrency)
                            level = await run_level(paths[name], concurrency, each, stream_s, pids)
                            turns[name] += level.turns
                    for verdict in verdicts(paced, concurrency, turns["direct"], turns["stack"]):
                        print(verdict.line(), flush=True)
                        found.append(verdict)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--chunks", type=int, default=200, help="chunks of 4 characters per answer")
    parser.add_argument("--chunk-delay-ms", type=float, default=5.0, help="pause between chunks (0: unpaced)")
    parser.add_argument("--rounds", type=int, default=4, help="turns per chat, level and path")
    parser.add_argument("--levels", default="1,50", help="comma-separated concurrency levels")
    parser.add_argument(
        "--runner-workers", type=int, default=default_runner_workers(), help="agent-runner worker processes"
    )
    parser.add_argument(
        "--untraced-twice",
        action="store_true",
        help="an A/A run: every stack untraced, so the printed cost of tracing is the comparison's own noise",
    )
    parser.add_argument(
        "--sample-ratio",
        type=float,
        default=None,
        help="the traced stacks record this share of traces (OTEL_TRACES_SAMPLER_ARG); 0: tracing on, nothing sampled",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="every target at 1 and 20 chats, unpaced and paced, in under two minutes; exit 1 past twice a target",
    )
    args = parser.parse_args()
    if args.smoke:
        print(f"chat bench, smoke: {args.chunks} chunks of {CHUNK_CHARS} characters per turn, against direct")
        found = uvloop.run(smoke(args.chunks, args.runner_workers))
        regressed = [verdict for verdict in found if verdict.past_twice_the_target]
        if regressed:
            print(f"worse than twice the target: {', '.join(verdict.figure for verdict in regressed)}")
            raise SystemExit(1)
        return
    levels = [int(level) for level in args.levels.split(",")]
    uvloop.run(
        run(
            args.chunks,
            args.chunk_delay_ms / 1000,
            args.rounds,
            levels,
            args.runner_workers,
            args.untraced_twice,
            args.sample_ratio,
        )
    )


if __name__ == "__main__":
    main()
