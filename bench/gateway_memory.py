"""The gateway's resident memory over many chat turns: what grows, per block of turns, and where.

Real processes, as bench/chat.py starts them (embedded PostgreSQL and NATS, the hooks service,
one agent-runner worker, the gateway; traced, as `make run` and the soak run it), and the scripted
model server answering every turn with 50 chunks of 4 characters, 2 ms apart. `--chats` chats run
turns back to back through `POST /api/chat`, each read to its `finish`, a new session every 20
turns (as bench/soak.py does), for `--blocks` blocks of `--turns` turns. After each block the
gateway's RSS (VmRSS) is printed, and at the end its growth per 1,000 turns over the blocks after
the first (a least-squares line: the first block fills pools and caches).

`--tracemalloc` runs a second gateway beside the first with tracemalloc on (10 frames), sends the
same turns through it, and after each block prints the allocations that grew most since the block
before, by the line that made them (after a `gc.collect()`, so what is printed is held, not garbage
not yet collected): where the memory goes.

    .venv/bin/python -P bench/gateway_memory.py [--chats 4] [--turns 250] [--blocks 6] [--tracemalloc]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/chat.py, ahead of tests/chat
# bench/chat.py's stack (pyright resolves `chat` to tests/chat, which tests/ on its path puts first).
from chat import API_KEY, MODEL, model_server, stack  # pyright: ignore[reportAttributeAccessIssue]

from popagent_dev import embedded

# Run as the traced gateway: tracemalloc, and a thread that answers each `request-<n>` file in its
# folder with `report-<n>`, the growth since the previous report.
TRACED_GATEWAY = """
import gc, linecache, os, sys, threading, time, tracemalloc, runpy
folder = sys.argv[1]
sys.argv = [sys.argv[0]]
tracemalloc.start(10)

def answer():
    previous = None
    number = 0
    while True:
        request = os.path.join(folder, f"request-{number}")
        if not os.path.exists(request):
            time.sleep(0.2)
            continue
        gc.collect()
        # Not the report's own: tracemalloc's, and the source lines linecache reads to print it.
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, linecache.__file__)]
        )
        lines = [f"traced {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MiB"]
        if previous is not None:
            for stat in snapshot.compare_to(previous, "traceback")[:8]:
                if stat.size_diff <= 0:
                    break
                lines.append(f"{stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks")
                lines.extend(f"      {line}" for line in stat.traceback.format(limit=5, most_recent_first=True))
        previous = snapshot
        with open(os.path.join(folder, f"report-{number}.tmp"), "w") as out:
            out.write("\\n".join(lines) + "\\n")
        os.rename(os.path.join(folder, f"report-{number}.tmp"), os.path.join(folder, f"report-{number}"))
        number += 1

threading.Thread(target=answer, daemon=True).start()
runpy.run_module("popagent_gateway", run_name="__main__")
"""


def environment(pid: int) -> dict[str, str]:
    """A running process's environment (the bench runs as the same user)."""
    items = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    return dict(item.split("=", 1) for item in items if "=" in item)


@contextlib.contextmanager
def traced_gateway(env: dict[str, str], folder: Path) -> Iterator[tuple[str, int]]:
    """(url, pid) of a gateway with the stack's settings, run with tracemalloc."""
    port = embedded.free_port()
    with (folder / "gateway.log").open("ab") as out:
        process = subprocess.Popen(
            embedded.orphan_safe([sys.executable, "-c", TRACED_GATEWAY, str(folder)]),
            env=env | {"POPAGENT_GATEWAY_PORT": str(port)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield f"http://127.0.0.1:{port}", process.pid
    finally:
        process.terminate()
        process.wait(20)


async def wait_ready(url: str, within_s: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    async with httpx.AsyncClient() as probe:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if (await probe.get(f"{url}/api/health", headers={"x-popagent-key": API_KEY})).status_code:
                    return
            if loop.time() > deadline:
                raise RuntimeError(f"{url} did not answer within {within_s:.0f} s")
            await asyncio.sleep(0.2)


async def chat_turns(client: httpx.AsyncClient, chats: int, turns: int) -> None:
    """`turns` chat turns over `chats` chats in flight, each read to its finish."""
    remaining = iter(range(turns))

    async def chat() -> None:
        session = ""
        for number in remaining:
            if not session or number % 20 == 0:
                created = await client.post("/api/sessions", json={"title": "memory"})
                created.raise_for_status()
                session = created.json()["id"]
            message = {"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": "Go"}]}
            body = bytearray()
            async with client.stream(
                "POST", "/api/chat", json={"id": session, "model": MODEL, "message": message}
            ) as response:
                async for chunk in response.aiter_bytes():
                    body += chunk
            if response.status_code != 200 or b'"type":"finish"' not in body:
                raise RuntimeError(f"chat turn {response.status_code}: {bytes(body[-300:])!r}")

    await asyncio.gather(*(chat() for _ in range(chats)))


def slope(values: list[float]) -> float:
    """The least-squares slope of `values` over their index."""
    xs = range(len(values))
    mean_x, mean_y = statistics.mean(xs), statistics.mean(values)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, values, strict=True)) / sum(
        (x - mean_x) ** 2 for x in xs
    )


async def report(folder: Path, number: int) -> str:
    (folder / f"request-{number}").touch()
    answer = folder / f"report-{number}"
    for _ in range(1200):
        if answer.exists():
            return answer.read_text()
        await asyncio.sleep(0.25)
    raise RuntimeError("the traced gateway did not report")


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="popagent-gateway-memory-") as directory:
        data = Path(directory)
        async with model_server(50, 0.002) as (model_url, _), stack(data, model_url, 1) as (url, pids):
            gateway = psutil.Process(pids["gateway"])
            rss: list[float] = []
            async with httpx.AsyncClient(base_url=url, headers={"x-popagent-key": API_KEY}, timeout=60) as client:
                for block in range(args.blocks):
                    await chat_turns(client, args.chats, args.turns)
                    await asyncio.sleep(1)
                    rss.append(gateway.memory_info().rss / 2**20)
                    print(f"after {(block + 1) * args.turns:5d} turns: gateway RSS {rss[-1]:.1f} MiB", flush=True)
            if len(rss) > 2:
                per_block = slope(rss[1:])
                print(
                    f"gateway RSS growth after the first block: {per_block * 1000 / args.turns:+.2f} MiB per 1,000 turns "
                    f"({rss[1]:.1f} -> {rss[-1]:.1f} MiB over {(len(rss) - 2) * args.turns} turns)"
                )
            if args.tracemalloc:
                folder = data / "traced"
                folder.mkdir()
                with traced_gateway(environment(pids["gateway"]), folder) as (traced_url, _):
                    await wait_ready(traced_url, 600)
                    headers = {"x-popagent-key": API_KEY}
                    async with httpx.AsyncClient(base_url=traced_url, headers=headers, timeout=120) as client:
                        for block in range(args.blocks + 1):
                            if block:
                                await chat_turns(client, args.chats, args.turns)
                            await asyncio.sleep(1)
                            print(f"\ntraced gateway after {block * args.turns} turns:")
                            print(await report(folder, block), end="", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chats", type=int, default=4)
    parser.add_argument("--turns", type=int, default=250)
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--tracemalloc", action="store_true")
    uvloop.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
