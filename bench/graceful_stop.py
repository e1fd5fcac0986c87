"""Graceful stop at full size (RELIABILITY row 10): SIGTERM to the whole stack while 100 background
runs are in flight and 200 chat streams are open.

    .venv/bin/python -P bench/graceful_stop.py [--runs 100] [--streams 200] [--task-concurrency 64]

The stack is `make run`'s launcher (every service, embedded PostgreSQL and NATS) with the scripted
model server (bench/helpers/soak_model.py) as its own process, answering every turn with a slow
stream (60 chunks, 500 ms apart: 30 s), so every run is mid-answer when the signal comes. The
runs are background tasks created through `POST /api/tasks`; the tasks worker takes
`--task-concurrency` of them at once (the agent-runtime setting `taskConcurrency`, at most 64),
the rest wait queued, in flight all the same. The streams are chat turns read through the gateway
with no client timeout. Once every task the worker can take is running and every stream has
streamed text, the launcher gets SIGTERM (as `docker stop` or systemd sends it) and passes it on to
every child.

Printed, with the targets:
- each process's time from the signal to its exit, against its bound: the gateway's
  `timeout_graceful_shutdown` (5 s) + 2 s, every other process and the launcher itself the
  launcher's stop bound (10 s, after which it kills) + 2 s;
- streams that ended with a terminal event (`finish` or `error`, then `[DONE]`) against broken
  ones (target 100 %);
- runs lost: the stack started again on the same data, every task must complete (target 0 lost),
  and every chat prompt must be in its session.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
import psutil
import uvloop

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the benchmarks' shared `bench.helpers` (`python -P` leaves bench/ off the path)
sys.path.append(str(REPO / "tests"))  # last, so no test folder shadows a module: tests/support

from bench.helpers.launched_stack import children, keep_draining, model_server  # noqa: E402
from support.launcher import launch  # noqa: E402

MODEL = "fake/fake-chat"
TERMINAL = {"completed", "failed", "cancelled", "dead-letter"}
GATEWAY_GRACE_S = 5.0  # popagent_gateway.__main__: uvicorn's timeout_graceful_shutdown
LAUNCHER_STOP_S = 10.0  # popagent_dev.launcher.Stack.stop_children: then SIGKILL


@dataclass
class Stream:
    session: str
    prompt: str
    status: int | None = None
    streaming: asyncio.Event = field(default_factory=asyncio.Event)
    ends: list[str] = field(default_factory=list)
    done: bool = False
    broken: str = ""

    @property
    def terminal(self) -> bool:
        return bool(self.ends) and self.done


async def read_stream(client: httpx.AsyncClient, stream: Stream) -> None:
    message = {"id": f"u-{uuid.uuid4().hex}", "role": "user", "parts": [{"type": "text", "text": stream.prompt}]}
    body = {"id": stream.session, "model": MODEL, "message": message}
    try:
        async with client.stream("POST", "/api/chat", json=body) as response:
            stream.status = response.status_code
            async for line in response.aiter_lines():
                if line == "data: [DONE]":
                    stream.done = True
                elif line.startswith("data: {"):
                    kind = orjson.loads(line.removeprefix("data: "))["type"]
                    if kind == "text-delta":
                        stream.streaming.set()
                    elif kind in ("finish", "error"):
                        stream.ends.append(kind)
    except httpx.HTTPError as exc:
        stream.broken = f"{type(exc).__name__}: {exc}"
    finally:
        stream.streaming.set()  # never streams now: nobody waits for it any longer


def watch_exits(pids: dict[str, int], signalled: float, exits: dict[str, float]) -> None:
    """Record, for each process, seconds from the signal to its exit (polled every 20 ms)."""
    processes = {name: psutil.Process(pid) for name, pid in pids.items()}
    while len(exits) < len(processes):
        for name, process in processes.items():
            if name not in exits and (not process.is_running() or process.status() == psutil.STATUS_ZOMBIE):
                exits[name] = time.monotonic() - signalled
        time.sleep(0.02)


async def wait_for(what: str, check: Callable[[], Awaitable[bool]], timeout_s: float, interval_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(interval_s)


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="popagent-bench-stop-") as tmp, model_server(60, 500.0) as model_url:
        env = {"NINEROUTER_URL": model_url}
        stack = launch(Path(tmp), env)
        headers = {"x-popagent-key": ""}
        try:
            await asyncio.to_thread(stack.wait_running, 300)
            keep_draining(stack)
            headers = {"x-popagent-key": stack.api_key}
            limits = httpx.Limits(max_connections=args.streams + 20, max_keepalive_connections=args.streams + 20)
            async with (
                httpx.AsyncClient(base_url=stack.url, headers=headers, timeout=30) as api,
                httpx.AsyncClient(base_url=stack.url, headers=headers, timeout=None, limits=limits) as streams_client,
            ):
                changed = await api.patch(
                    "/api/settings/agent-runtime", json={"taskConcurrency": args.task_concurrency}
                )
                changed.raise_for_status()
                task_ids = []
                for n in range(args.runs):
                    created = await api.post(
                        "/api/tasks",
                        json={"prompt": f"run {n} across the stop", "workspaceId": "popagent", "model": MODEL},
                    )
                    created.raise_for_status()
                    task_ids.append(created.json()["id"])
                running_target = min(args.runs, args.task_concurrency)

                async def enough_running() -> bool:
                    listed = await api.get("/api/tasks", params={"status": "running", "limit": 200})
                    return len(listed.json()["tasks"]) >= running_target

                await wait_for(f"{running_target} tasks to run", enough_running, 120)
                sessions = []
                for _ in range(args.streams):
                    created = await api.post("/api/sessions", json={"title": "stop"})
                    created.raise_for_status()
                    sessions.append(created.json()["id"])
                streams = [Stream(session, f"stream {n} across the stop") for n, session in enumerate(sessions)]
                readers = [asyncio.create_task(read_stream(streams_client, s)) for s in streams]
                await asyncio.wait_for(asyncio.gather(*(s.streaming.wait() for s in streams)), 180)
                open_streams = sum(1 for s in streams if not s.ends and not s.broken and s.status == 200)
                listed = await api.get("/api/tasks", params={"status": "running", "limit": 200})
                running = len(listed.json()["tasks"])
                pids = {name: child["pid"] for name, child in children(stack).items()}
                pids["launcher"] = stack.process.pid
                exits: dict[str, float] = {}
                signalled = time.monotonic()
                os.kill(stack.process.pid, signal.SIGTERM)
                watcher = threading.Thread(target=watch_exits, args=(pids, signalled, exits), daemon=True)
                watcher.start()
                await asyncio.to_thread(stack.process.wait, 60)
                await asyncio.to_thread(watcher.join, 30)
                done, _ = await asyncio.wait(readers, timeout=10)
                for reader in readers:
                    reader.cancel()
        finally:
            stack.stop()

        print(
            f"graceful stop: SIGTERM to the launcher with {args.runs} background runs in flight "
            f"({running} running, {args.runs - running} queued) and {open_streams} of {args.streams} chat "
            "streams open and streaming"
        )
        print("  exit after the signal (target: the process's bound + 2 s):")
        for name, seconds in sorted(exits.items(), key=lambda item: item[1]):
            bound = GATEWAY_GRACE_S if name == "gateway" else LAUNCHER_STOP_S
            verdict = "ok" if seconds <= bound + 2 else "MISSED"
            print(f"    {name:15} {seconds:6.2f} s  (bound {bound:g} + 2 s: {verdict})")
        terminal = sum(1 for s in streams if s.terminal)
        broken = [s for s in streams if not s.terminal]
        verdict = "ok" if terminal == len(streams) else "MISSED"
        print(f"  streams with a terminal event: {terminal} of {len(streams)} (target 100 %: {verdict})")
        print(
            f"    ends: finish {sum(s.ends[-1:] == ['finish'] for s in streams)}, error {sum(s.ends[-1:] == ['error'] for s in streams)}"
        )
        for stream in broken[:5]:
            print(f"    not terminal: {stream.prompt}: status {stream.status}, ends {stream.ends}, {stream.broken}")
        print(f"    reader tasks ended within 10 s of the exit: {len(done)} of {len(readers)}")

        again = launch(Path(tmp), env)
        try:
            await asyncio.to_thread(again.wait_running, 300)
            keep_draining(again)
            async with httpx.AsyncClient(
                base_url=again.url, headers={"x-popagent-key": again.api_key}, timeout=30
            ) as api:
                statuses: dict[str, str] = {}

                async def all_ended() -> bool:
                    for task_id in task_ids:
                        if statuses.get(task_id) not in TERMINAL:
                            statuses[task_id] = (await api.get(f"/api/tasks/{task_id}")).json()["status"]
                    return all(status in TERMINAL for status in statuses.values())

                started_again = time.monotonic()
                await wait_for("every task to end after the restart", all_ended, 600, 2)
                took = time.monotonic() - started_again
                kept = 0
                for stream in streams:
                    messages = (await api.get(f"/api/sessions/{stream.session}")).json()["messages"]
                    kept += any(
                        m["role"] == "user" and m["parts"] == [{"type": "text", "text": stream.prompt}]
                        for m in messages
                    )
        finally:
            again.stop()
        completed = sum(1 for status in statuses.values() if status == "completed")
        by_status: dict[str, int] = {}
        for status in statuses.values():
            by_status[status] = by_status.get(status, 0) + 1
        verdict = "ok" if completed == len(task_ids) else "MISSED"
        print(
            f"  after a restart on the same data: {completed} of {len(task_ids)} runs completed in {took:.0f} s "
            f"{by_status} (target 0 lost: {verdict})"
        )
        verdict = "ok" if kept == len(streams) else "MISSED"
        print(f"  chat prompts kept in their sessions: {kept} of {len(streams)} (target all: {verdict})")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="background tasks in flight at the signal")
    parser.add_argument("--streams", type=int, default=200, help="chat streams open at the signal")
    parser.add_argument("--task-concurrency", type=int, default=64, help="the tasks worker's concurrency (<= 64)")
    uvloop.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
