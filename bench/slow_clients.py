"""Slow readers and abrupt disconnects against the whole stack (issue 22; RELIABILITY row 12).

Real processes, started as bench/chat.py starts them (embedded PostgreSQL and NATS, the hooks
service, one agent-runner worker, the gateway), with the scripted model server of
bench/helpers/soak_model.py as its own process producing `--producer-per-s` chunks a second
(100 by default, the row's producer).

- Slow consumers: `--slow` clients each ask for a long answer (it outlasts the window) and read
  their chat stream one SSE event a second (`--slow-events-per-s`), through a 4 KiB receive
  buffer, so the kernel's buffers fill at once and backpressure reaches the server, for
  `--slow-seconds`, while 10 normal chats run turns back to back. Printed: the gateway's and
  agent-runner's RSS growth per slow stream at the end of the window (target <= 1 MiB) beside what
  each slow stream's producer emitted by then, and the normal turns' p99 time to first token and
  total time against the same 10 chats run first without slow readers (target: within 2x).
- Abrupt disconnects: `--disconnects` chats, 100 at a time, each closed with a TCP reset as soon
  as its first text arrives. Printed: open file descriptors and threads of the gateway and
  agent-runner before, and 5 s after the last reset (target: at most baseline + 5). The row's
  "tasks" are counted as threads: asyncio tasks inside a service cannot be counted from outside
  without instrumenting it.

    .venv/bin/python -P bench/slow_clients.py [--slow 20] [--slow-seconds 60] [--slow-events-per-s 1]
        [--producer-per-s 100] [--disconnects 1000] [--rounds 6] [--no-continue-on-disconnect]

`--slow 0` runs the disconnects alone. A vanished client's turn runs on to its end by default
(agent-runtime continueOnDisconnect), so the runner's handles 5 s after the last reset are those
turns; the bench then waits for them and prints when the runner is back to its baseline, and
`--no-continue-on-disconnect` turns the setting off first (each vanished client's turn is cancelled).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import statistics
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import orjson
import psutil
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/chat.py, ahead of tests/chat
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # the benchmarks' shared `bench.helpers`
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))  # tests/support, for bench.helpers.launched_stack
# bench/chat.py's stack (pyright resolves `chat` to tests/chat, which tests/ on its path puts first).
from chat import API_KEY, MODEL, stack  # pyright: ignore[reportAttributeAccessIssue]

from bench.helpers.launched_stack import model_server

HEADERS = {"x-popagent-key": API_KEY}


def chat_request(host: str, session: str, prompt: str = "Go") -> bytes:
    body = orjson.dumps(
        {
            "id": session,
            "model": MODEL,
            "message": {"id": f"u-{uuid.uuid4().hex}", "role": "user", "parts": [{"type": "text", "text": prompt}]},
        }
    )
    head = (
        f"POST /api/chat HTTP/1.1\r\nhost: {host}\r\nx-popagent-key: {API_KEY}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


async def new_sessions(url: str, count: int) -> list[str]:
    async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=30) as client:
        created = await asyncio.gather(*(client.post("/api/sessions", json={"title": "bench"}) for _ in range(count)))
    return [response.json()["id"] for response in created]


async def timed_turn(url: str, session: str) -> tuple[float, float]:
    """(time to first text-delta, total) of one chat turn, read at full speed."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    started = time.perf_counter()
    writer.write(chat_request(f"{host}:{port}", session))
    first = 0.0
    try:
        while data := await reader.read(65536):
            if not first and b'"text-delta"' in data:
                first = time.perf_counter()
    finally:
        writer.close()
    if not first:
        raise RuntimeError("a normal turn streamed no text")
    return first - started, time.perf_counter() - started


async def normal_chats(url: str, sessions: list[str], rounds: int) -> list[tuple[float, float]]:
    async def one_chat(session: str) -> list[tuple[float, float]]:
        return [await timed_turn(url, session) for _ in range(rounds)]

    results = await asyncio.gather(*(one_chat(session) for session in sessions))
    return [turn for chat in results for turn in chat]


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


async def slow_reader(url: str, session: str, events_per_s: float, stop: asyncio.Event) -> int:
    """A long chat read one SSE event every 1/`events_per_s` s until `stop`, through a 4 KiB receive
    buffer (the socket is read only when no whole event is left in hand); the events read."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    held = b""
    events = 0
    try:
        await loop.sock_connect(sock, _address(url))
        await loop.sock_sendall(sock, chat_request(url.removeprefix("http://"), session, "LONG-ANSWER please"))
        while not stop.is_set():
            while b"\n\n" not in held:
                data = await loop.sock_recv(sock, 512)
                if not data:
                    return events
                held += data
            held = held.split(b"\n\n", 1)[1]
            events += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1 / events_per_s)
    finally:
        sock.close()
    return events


async def reset_after_first_text(url: str, session: str) -> None:
    """A chat whose client vanishes (TCP reset, no FIN) once its first text arrives."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    try:
        await loop.sock_connect(sock, _address(url))
        await loop.sock_sendall(sock, chat_request(url.removeprefix("http://"), session))
        seen = b""
        while b'"text-delta"' not in seen:
            data = await loop.sock_recv(sock, 65536)
            if not data:
                return
            seen = seen[-64:] + data
    finally:
        sock.close()  # SO_LINGER 0: the close is a reset


# A text-delta chunk of 4 characters as the gateway writes it: `data: {"type":"text-delta","id":"…","delta":"…"}\n\n`.
SSE_BYTES_PER_CHUNK = 70


def rss_mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def handles(pid: int) -> tuple[int, int]:
    process = psutil.Process(pid)
    return process.num_fds(), process.num_threads()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="popagent-bench-slow-") as tmp:
        data = Path(tmp)
        data.chmod(0o755)  # noqa: ASYNC240 - once, before anything runs
        chunk_delay_ms = 1000 / args.producer_per_s
        # The long answer outlasts the slow window (and the settling before it) at the producer's pace.
        long_chunks = int(args.producer_per_s * (args.slow_seconds + 60))
        with model_server(args.chunks, chunk_delay_ms, long_chunks=long_chunks) as model_url:
            async with stack(data, model_url, 1) as (url, pids):
                await measure(args, url, pids)


async def measure(args: argparse.Namespace, url: str, pids: dict[str, int]) -> None:
    sessions = await new_sessions(url, 10 + args.slow)
    normal, slow_sessions = sessions[:10], sessions[10:]
    await normal_chats(url, normal, 1)  # warm up
    baseline = await normal_chats(url, normal, args.rounds)
    if args.slow:
        await slow_consumers(args, url, pids, normal, slow_sessions, baseline)
    await vanished_clients(args, url, pids)


async def slow_consumers(
    args: argparse.Namespace,
    url: str,
    pids: dict[str, int],
    normal: list[str],
    slow_sessions: list[str],
    baseline: list[tuple[float, float]],
) -> None:
    gateway, runner = pids["gateway"], pids["agent-runner-1"]
    before = rss_mib(gateway), rss_mib(runner)
    stop = asyncio.Event()
    window_started = time.perf_counter()
    readers = [asyncio.create_task(slow_reader(url, s, args.slow_events_per_s, stop)) for s in slow_sessions]
    await asyncio.sleep(2)
    loaded = await normal_chats(url, normal, args.rounds)
    # The rest of the window: the slow streams' producers go on, their readers stay slow.
    await asyncio.sleep(max(0.0, args.slow_seconds - (time.perf_counter() - window_started)))
    during = rss_mib(gateway), rss_mib(runner)
    window = time.perf_counter() - window_started
    stop.set()
    read = await asyncio.gather(*readers, return_exceptions=True)
    events_read = [n for n in read if isinstance(n, int)]
    print(
        f"slow consumers: {args.slow} long streams produced at {args.producer_per_s:g} chunks/s, read at "
        f"{args.slow_events_per_s:g} event/s for {window:.0f} s, beside 10 normal chats"
    )
    produced_kib = args.producer_per_s * window * SSE_BYTES_PER_CHUNK / 1024
    print(
        f"  each slow stream's producer emitted ~{produced_kib:.0f} KiB of SSE in the window; its reader took "
        f"{statistics.mean(events_read) if events_read else 0:.0f} events"
    )
    for name, b, d in (("gateway", before[0], during[0]), ("agent-runner", before[1], during[1])):
        per = max(0.0, d - b) / args.slow
        verdict = "ok" if per <= 1.0 else "MISSED"
        print(f"  {name:13} RSS {b:7.1f} -> {d:7.1f} MiB: {per:.2f} MiB per slow stream (target <= 1 MiB: {verdict})")
    for label, index in (("time to first token", 0), ("turn time", 1)):
        base = percentile([t[index] for t in baseline], 0.99)
        load = percentile([t[index] for t in loaded], 0.99)
        verdict = "ok" if load <= 2 * base else "MISSED"
        print(
            f"  normal turns' {label} p99: {base * 1000:.1f} ms alone, {load * 1000:.1f} ms beside the slow "
            f"readers ({load / base:.2f}x; target <= 2x: {verdict})"
        )


async def vanished_clients(args: argparse.Namespace, url: str, pids: dict[str, int]) -> None:
    gateway, runner = pids["gateway"], pids["agent-runner-1"]
    await asyncio.sleep(2)
    if not args.continue_on_disconnect:
        async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=30) as client:
            changed = await client.patch("/api/settings/agent-runtime", json={"continueOnDisconnect": False})
            changed.raise_for_status()
    resets = await new_sessions(url, min(args.disconnects, 100))
    # One batch first, so the pools a load of 100 turns opens (database connections, keep-alive
    # connections to the model) are in the baseline: handles that stay after it are not leaks.
    await asyncio.gather(*(reset_after_first_text(url, session) for session in resets), return_exceptions=True)
    await asyncio.sleep(10)
    start_handles = handles(gateway), handles(runner)
    started = time.perf_counter()
    for offset in range(0, args.disconnects, 100):
        batch = range(offset, min(offset + 100, args.disconnects))
        await asyncio.gather(
            *(reset_after_first_text(url, resets[n % len(resets)]) for n in batch), return_exceptions=True
        )
    took = time.perf_counter() - started
    await asyncio.sleep(5)
    end_handles = handles(gateway), handles(runner)
    print(f"abrupt disconnects: {args.disconnects} chats reset after their first text ({took:.1f} s)")
    for name, (fds0, threads0), (fds1, threads1) in (
        ("gateway", start_handles[0], end_handles[0]),
        ("agent-runner", start_handles[1], end_handles[1]),
    ):
        verdict = "ok" if fds1 - fds0 <= 5 and threads1 - threads0 <= 5 else "MISSED"
        print(
            f"  {name:13} fds {fds0} -> {fds1}, threads {threads0} -> {threads1} 5 s later "
            f"(target: at most baseline + 5: {verdict})"
        )
    # A vanished client's turn runs on to its end (agent-runtime continueOnDisconnect, on by default):
    # the runner's handles are the turns still running, not leaked, until those end.
    waited = 5.0
    while waited < 120 and not all(
        now[0] - then[0] <= 5 and now[1] - then[1] <= 5
        for now, then in zip((handles(gateway), handles(runner)), start_handles, strict=True)
    ):
        await asyncio.sleep(1)
        waited += 1
    fds_now, threads_now = handles(runner)
    setting = "on: the vanished clients' turns ran on" if args.continue_on_disconnect else "off"
    print(
        f"  agent-runner  fds {fds_now}, threads {threads_now} {waited:.0f} s after the last reset "
        f"(continueOnDisconnect {setting})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--slow", type=int, default=20, help="slow-reading chat streams")
    parser.add_argument("--disconnects", type=int, default=1000, help="chats reset after their first text")
    parser.add_argument(
        "--rounds", type=int, default=6, help="turns per normal chat, alone and beside the slow readers"
    )
    parser.add_argument("--chunks", type=int, default=200, help="chunks of 4 characters per normal answer")
    parser.add_argument("--producer-per-s", type=float, default=100.0, help="chunks a second the model streams")
    parser.add_argument("--slow-seconds", type=float, default=60.0, help="how long the slow readers read")
    parser.add_argument("--slow-events-per-s", type=float, default=1.0, help="SSE events a slow reader takes a second")
    parser.add_argument(
        "--no-continue-on-disconnect",
        dest="continue_on_disconnect",
        action="store_false",
        help="turn the agent-runtime setting off before the disconnects: a vanished client's turn is cancelled",
    )
    uvloop.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
