"""What the turn log costs agent-runner's resident memory under slow readers, against the turn log
as it was before its acknowledged writer, same run (tests/chat/test_backpressure.py's scene).

Real processes, as bench/chat.py starts them (embedded PostgreSQL and NATS, the hooks service, one
agent-runner worker and the gateway), and the scripted model server answering every turn with a
2 MB text in 1 KB chunks, as fast as it can. For each variant below a fresh agent-runner process
with the stack's settings is started; after one turn read at full speed (imports, pools and caches
a first turn fills) and a second of quiet, `--concurrent` turns are read over gRPC one batch at a
time with `--pause-ms` after each, and its resident memory (VmRSS) is sampled every 50 ms. Printed
per variant: idle RSS and the peak over idle, median and range over `--rounds` (the variants
alternate within each round, so a loaded machine weighs on all of them alike).

- `writer`: the code as it is (each turn's batches stored in order by its writer, each
  acknowledged by the stream);
- `core-publish`: `TurnLog.append` as it was before the writer (each batch a core NATS publish
  on the live stream's path, no acknowledgement), patched into the process at its start;
- `no-log`: `TurnLog.append` stores nothing: what the log costs at all.

Each variant's log is kept in the run's folder: a writer that cannot store a message says so there.

    .venv/bin/python -P bench/turn_log_memory.py [--rounds 3] [--concurrent 10] [--pause-ms 50]
        [--variants writer,core-publish,no-log]
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
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import psutil
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/chat.py, ahead of tests/chat
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # the benchmarks' shared `bench.helpers`
# bench/chat.py's stack (pyright resolves `chat` to tests/chat, which tests/ on its path puts first).
from chat import MODEL, MODEL_KEY, SERVE_WITH_NODELAY, stack  # pyright: ignore[reportAttributeAccessIssue]

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_core.grpc_client import check_health, open_channel
from popagent_dev import embedded

REPO = Path(__file__).resolve().parents[1]
ANSWER_BYTES = 2 * 1024 * 1024
VARIANTS = ("writer", "core-publish", "no-log")

# Run in the agent-runner process before the service starts: the variant's `TurnLog.append`.
RUN_VARIANT = """
import os, sys, runpy
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
variant = sys.argv[1]
sys.argv = [sys.argv[0]]
from popagent_agent_runner.turn import log
if variant == "core-publish":
    from nats.errors import Error as NatsError

    async def append(self, turn_id, batch):
        try:
            for message in log._messages(batch):
                await self.nats.publish(log.subject(turn_id), message)
        except NatsError as exc:
            self._failed("turn log append failed", turn_id, exc)

    log.TurnLog.append = append
elif variant == "no-log":
    async def append(self, turn_id, batch):
        return None

    log.TurnLog.append = append
runpy.run_module("popagent_agent_runner", run_name="__main__")
"""


@contextlib.contextmanager
def model_server(text: str) -> Iterator[str]:
    """The scripted model server answering every turn with `text` in 1 KB chunks, at once."""
    turn = {"text": text, "chunk_size": 1024, "chunk_delay_s": 0.0}
    models = [{"id": MODEL}, {"id": "cx/gpt-5.3-codex"}, {"id": "cx/gpt-5.3-codex-spark"}]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as script:
        json.dump({"turns": [turn], "loop": True, "api_key": MODEL_KEY, "models": models}, script)
    port = embedded.free_port()
    command = [sys.executable, "-c", SERVE_WITH_NODELAY, "--port", str(port), "--script", script.name, "--no-record"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests")}
    process = subprocess.Popen(embedded.orphan_safe(command), env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"model server did not start: {line!r}")
        yield line.rsplit(" ", 1)[-1].strip()
    finally:
        process.terminate()
        process.wait(10)
        os.unlink(script.name)


@contextlib.contextmanager
def runner(variant: str, env: dict[str, str], log: Path) -> Iterator[tuple[str, int]]:
    """(address, pid) of an agent-runner process running `variant`."""
    address = f"127.0.0.1:{embedded.free_port()}"
    command = [sys.executable, "-c", RUN_VARIANT, variant]
    with log.open("ab") as out:
        process = subprocess.Popen(
            embedded.orphan_safe(command),
            env=env | {"POPAGENT_AGENT_RUNNER_ADDR": address},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield address, process.pid
    finally:
        process.terminate()
        process.wait(20)


@contextlib.asynccontextmanager
async def stubs(
    address: str, token: str, start_s: float
) -> AsyncIterator[
    tuple[agent_runner_pb2_grpc.AgentRunnerServiceStub, agent_runner_pb2_grpc.AgentRunnerStateServiceStub]
]:
    async with open_channel(address, token) as channel:
        deadline = asyncio.get_running_loop().time() + start_s
        while not await check_health(channel, timeout_s=0.5):
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError("the agent-runner process did not start")
            await asyncio.sleep(0.1)
        yield (
            agent_runner_pb2_grpc.AgentRunnerServiceStub(channel),
            agent_runner_pb2_grpc.AgentRunnerStateServiceStub(channel),
        )


async def slow_turn(chat: agent_runner_pb2_grpc.AgentRunnerServiceStub, session: str, pause_s: float) -> int:
    """One turn read one batch at a time with a pause after each; the text bytes received."""
    message = {"id": f"u-{session}", "role": "user", "parts": [{"type": "text", "text": "a long answer, please"}]}
    call = chat.Chat(pb.ChatRequest(session_id=session, model=MODEL, message_json=orjson.dumps(message).decode()))
    received = 0
    async for batch in call:
        for event in batch.events:
            if event.HasField("text_delta"):
                received += len(event.text_delta.delta)
            if event.HasField("error"):
                raise RuntimeError(event.error.message)
        await asyncio.sleep(pause_s)
    return received


async def measure(
    variant: str, env: dict[str, str], token: str, data: Path, args: argparse.Namespace
) -> tuple[int, int]:
    """(idle, peak) RSS in bytes of a fresh runner running `variant` under the slow readers."""
    with runner(variant, env, data / f"runner-{variant}.log") as (address, pid):
        async with stubs(address, token, 120) as (chat, state):
            sessions = [
                (await state.CreateSession(pb.CreateSessionRequest(title="heavy"))).id
                for _ in range(args.concurrent + 1)
            ]
            received = await slow_turn(chat, sessions[0], 0)
            if received != ANSWER_BYTES:
                raise RuntimeError(f"{variant}: the warm-up turn got {received} bytes")
            watched = psutil.Process(pid)
            await asyncio.sleep(1)
            idle = peak = watched.memory_info().rss

            async def watch() -> None:
                nonlocal peak
                while True:
                    peak = max(peak, watched.memory_info().rss)
                    await asyncio.sleep(0.05)

            watching = asyncio.create_task(watch())
            try:
                pause_s = args.pause_ms / 1000
                got = await asyncio.gather(*(slow_turn(chat, session, pause_s) for session in sessions[1:]))
            finally:
                watching.cancel()
            peak = max(peak, watched.memory_info().rss)
            if got != [ANSWER_BYTES] * args.concurrent:
                raise RuntimeError(f"{variant}: turns got {got}")
    return idle, peak


def environment(pid: int) -> dict[str, str]:
    """A running process's environment."""
    items = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    return dict(item.split("=", 1) for item in items if "=" in item)


def mib(value: float) -> str:
    return f"{value / 2**20:.1f}"


async def run(args: argparse.Namespace) -> None:
    text = ("x" * 1023 + "\n") * (ANSWER_BYTES // 1024)
    variants = [variant.strip() for variant in args.variants.split(",")]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    data = Path(tempfile.mkdtemp(prefix="popagent-turn-log-memory-"))
    print(f"the processes' logs: {data}")
    with model_server(text) as model_url:
        async with stack(data, model_url, 1) as (_, pids):
            # The stack's own agent-runner's settings (the bench runs as the same user).
            env = environment(pids["agent-runner-1"])
            token = environment(pids["gateway"])["POPAGENT_INTERNAL_TOKEN"]
            results: dict[str, list[tuple[int, int]]] = {variant: [] for variant in variants}
            for number in range(args.rounds):
                order = variants if number % 2 == 0 else variants[::-1]
                for variant in order:
                    idle, peak = await measure(variant, env, token, data, args)
                    results[variant].append((idle, peak))
                    print(
                        f"round {number + 1} {variant:13s} idle {mib(idle)} MiB, peak over idle {mib(peak - idle)} MiB"
                    )
            print(f"\n{args.concurrent} turns of {ANSWER_BYTES // 2**20} MB read a batch every {args.pause_ms} ms")
            for variant, figures in results.items():
                over = [peak - idle for idle, peak in figures]
                idles = [idle for idle, _ in figures]
                print(
                    f"{variant:13s} peak over idle: median {mib(statistics.median(over))} MiB "
                    f"({mib(min(over))}-{mib(max(over))}); idle {mib(statistics.median(idles))} MiB"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrent", type=int, default=10)
    parser.add_argument("--pause-ms", type=float, default=50)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    uvloop.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
