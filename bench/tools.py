"""The workspace tools against baselines measured in the same run.

- read: `mastra_workspace_read_file` (the tool function itself: access check, worker thread,
  containment walk, binary check, line numbering, ledger) on a 10 KB file, against a bare
  `open().read()` of the same file. Target: <= 1 ms p50 added.
- grep: `mastra_workspace_grep` over this repository (hides .git, respects .gitignore) against
  `grep -rn` over the same tree with git's ignored folders excluded, for a pattern that only a
  full scan answers. Target: <= 2x.
- command: `mastra_workspace_execute_command true` under bubblewrap against a bare `subprocess`
  `true`. Target: <= 25 ms p50 added. Also with the service's default memory limit and disk
  budget (a memory cgroup or RLIMIT_AS, and the workspace measured before and after each
  command), in the scratch folder and, back to back, in this repository (tens of thousands of
  files), against the same sandbox without them.
- memory: the agent-runner service process's peak RSS (a real stack as bench/chat.py starts it:
  gateway, hooks, one agent-runner process, embedded PostgreSQL and NATS, the scripted model
  server) during one chat turn whose model calls `mastra_workspace_execute_command` 20 times in
  parallel, each command writing 1 MiB of output, against its RSS before that turn (after a
  warm-up turn of the same script).

    .venv/bin/python bench/tools.py [--reads 2000] [--commands 50]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import psutil

from popagent_agent_runner.context.hands import Hands
from popagent_agent_runner.tools.workspace import file_tools, shell_tools
from popagent_agent_runner.workspace.disk_budget import MIB, DiskBudget
from popagent_agent_runner.workspace.sandbox import Sandbox

sys.path.insert(0, str(Path(__file__).resolve().parent))
# bench/chat.py's stack (pyright resolves `chat` to tests/chat, which tests/ on its path puts first).
from chat import API_KEY, MODEL, MODEL_KEY, stack  # pyright: ignore[reportAttributeAccessIssue]

# The scripted model server, as the tests' stacks run it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.model_gateway import ModelGateway, ModelInfo, ToolCall, Turn

REPO_ROOT = Path(__file__).resolve().parents[1]
GREP_PATTERN = r"class [A-Z][A-Za-z]*Refusal\b"
# What .gitignore keeps out of this repository's tree, for grep -rn.
IGNORED_DIRS = (".git", ".venv", "node_modules", "dist", ".data", "__pycache__", ".ruff_cache")


def context(hands: Any) -> Any:
    """The slice of a RunContext the workspace tools read."""
    return SimpleNamespace(
        deps=SimpleNamespace(
            workspace_access="read-write", agent_id="bench", file_reads={}, turn=SimpleNamespace(hands=hands)
        )
    )


def p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def bench_read(folder: Path, hands: Any, reads: int) -> None:
    text = "".join(f"line {i:05d} of the ten kilobyte file\n" for i in range(280))[:10_240]
    (folder / "ten_kb.txt").write_text(text)
    bare: list[float] = []
    tool: list[float] = []
    ctx = context(hands)
    for _ in range(reads):
        started = time.perf_counter()
        # The baseline is the bare blocking read, on purpose.
        with open(folder / "ten_kb.txt") as handle:  # noqa: ASYNC230
            handle.read()
        bare.append(time.perf_counter() - started)
        started = time.perf_counter()
        await file_tools.read_file(ctx, "ten_kb.txt")
        tool.append(time.perf_counter() - started)
    added = p50_ms(tool) - p50_ms(bare)
    print(
        f"read 10 KB: open().read() p50 {p50_ms(bare) * 1000:.0f} us, tool p50 {p50_ms(tool) * 1000:.0f} us, "
        f"added {added * 1000:.0f} us (target <= 1000 us) {'OK' if added <= 1 else 'MISS'}"
    )


async def bench_grep(hands: Any, rounds: int = 5) -> None:
    ctx = context(hands)
    excludes = [f"--exclude-dir={name}" for name in IGNORED_DIRS]
    ours: list[float] = []
    theirs: list[float] = []
    found: dict[str, Any] = {}
    grep_lines = 0
    for _ in range(rounds):
        started = time.perf_counter()
        done = subprocess.run(  # noqa: ASYNC221 - the baseline, timed on its own
            ["grep", "-rnE", *excludes, GREP_PATTERN.replace(r"\b", ""), "."],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        theirs.append(time.perf_counter() - started)
        grep_lines = len(done.stdout.splitlines())
        started = time.perf_counter()
        found = await file_tools.grep(ctx, GREP_PATTERN, ".", None, 500)
        ours.append(time.perf_counter() - started)
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(
        f"grep this repository: grep -rn {p50_ms(theirs):.1f} ms ({grep_lines} matches), "
        f"tool {p50_ms(ours):.1f} ms ({len(found['matches'])} matches, {found['filesSearched']} files), "
        f"ratio {ratio:.2f}x (target <= 2x) {'OK' if ratio <= 2 else 'MISS'}"
    )


async def timed_true(ctx: Any) -> float:
    started = time.perf_counter()
    result = await shell_tools.execute_command(ctx, "true")
    assert result["exitCode"] == 0, result
    return time.perf_counter() - started


async def bench_command(
    hands: Any, limited: Any, limited_repository: Any, plain_repository: Any, commands: int
) -> None:
    ctx, limited_ctx = context(hands), context(limited)
    repository_ctx, plain_repository_ctx = context(limited_repository), context(plain_repository)
    bare: list[float] = []
    sandboxed: list[float] = []
    with_limits: list[float] = []
    repository: list[float] = []
    plain_repo: list[float] = []
    for _ in range(commands):
        started = time.perf_counter()
        process = await asyncio.create_subprocess_exec("true")
        await process.wait()
        bare.append(time.perf_counter() - started)
        sandboxed.append(await timed_true(ctx))
        with_limits.append(await timed_true(limited_ctx))
        plain_repo.append(await timed_true(plain_repository_ctx))
        repository.append(await timed_true(repository_ctx))
    added = p50_ms(sandboxed) - p50_ms(bare)
    print(
        f"execute_command true: bare subprocess p50 {p50_ms(bare):.1f} ms, under bubblewrap p50 "
        f"{p50_ms(sandboxed):.1f} ms, added {added:.1f} ms (target <= 25 ms) {'OK' if added <= 25 else 'MISS'}"
    )
    print(
        f"execute_command true with the memory limit and disk budget: scratch folder p50 {p50_ms(with_limits):.1f} ms "
        f"(without {p50_ms(sandboxed):.1f} ms), this repository back to back p50 {p50_ms(repository):.1f} ms "
        f"(without {p50_ms(plain_repo):.1f} ms)"
    )


PARALLEL_COMMANDS = 20
MIB_COMMAND = "head -c 1048576 /dev/zero | tr '\\0' x; sleep 0.5"


def parallel_commands(body: dict[str, Any]) -> Turn:
    """PARALLEL_COMMANDS parallel command calls when the user spoke last in an agent's turn, else a text
    (the results came back, or a side request such as the session's title, which offers no tools)."""
    offered = {tool["function"]["name"] for tool in body.get("tools") or []}
    messages = body.get("messages") or [{}]
    if messages[-1].get("role") == "user" and "mastra_workspace_execute_command" in offered:
        return Turn.call(
            *(
                ToolCall("mastra_workspace_execute_command", {"command": MIB_COMMAND}, id=f"run-{n}")
                for n in range(PARALLEL_COMMANDS)
            )
        )
    return Turn.say("Done.")


@contextlib.asynccontextmanager
async def parallel_commands_model() -> AsyncIterator[str]:
    """The scripted model server (in this process: only agent-runner's memory is measured)."""
    models = [ModelInfo(MODEL), ModelInfo("cx/gpt-5.3-codex"), ModelInfo("cx/gpt-5.3-codex-spark")]
    async with ModelGateway(parallel_commands, api_key=MODEL_KEY, models=models, record=False) as gateway:
        yield gateway.url


async def command_turn(client: httpx.AsyncClient, session: str) -> list[dict[str, Any]]:
    """One chat turn; the outputs of its command calls."""
    message = {"id": f"u-{uuid.uuid4().hex}", "role": "user", "parts": [{"type": "text", "text": "Run them"}]}
    outputs: list[dict[str, Any]] = []
    async with client.stream("POST", "/api/chat", json={"id": session, "model": MODEL, "message": message}) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line.removeprefix("data: "))
                if chunk.get("type") == "tool-output-available":
                    outputs.append(chunk["output"])
                elif chunk.get("type") == "tool-output-error":
                    raise RuntimeError(f"a command failed: {chunk.get('errorText')}")
    return outputs


async def bench_memory() -> None:
    with tempfile.TemporaryDirectory(prefix="popagent-bench-tools-stack-") as tmp:
        data = Path(tmp)
        data.chmod(0o755)  # noqa: ASYNC240 - once, before anything runs
        async with parallel_commands_model() as model_url, stack(data, model_url, 1) as (url, pids):
            runner = psutil.Process(pids["agent-runner-1"])
            (data / "workspace" / "bench-repo").mkdir()
            headers = {"x-popagent-key": API_KEY}
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as client:
                created = await client.post(
                    "/api/workspaces", json={"id": "bench", "name": "bench", "path": "bench-repo"}
                )
                created.raise_for_status()
                # The seeded policy asks before a command (docs/approvals.md); the bench measures the commands.
                emptied = await client.patch("/api/agents/popagent", json={"toolApproval": []})
                emptied.raise_for_status()
                session = await client.post("/api/sessions", json={"title": "bench", "workspaceId": "bench"})
                session.raise_for_status()
                session_id = session.json()["id"]
                await command_turn(client, session_id)  # warm-up: the sandbox probe, first-turn imports
                before = runner.memory_info().rss
                peak = before
                stop = asyncio.Event()

                async def sample() -> None:
                    nonlocal peak
                    while not stop.is_set():
                        peak = max(peak, runner.memory_info().rss)
                        await asyncio.sleep(0.005)

                sampler = asyncio.create_task(sample())
                started = time.perf_counter()
                outputs = await command_turn(client, session_id)
                took = time.perf_counter() - started
                stop.set()
                await sampler
    assert len(outputs) == PARALLEL_COMMANDS, outputs
    assert all(o["exitCode"] == 0 and o["omittedBytes"] > 0 for o in outputs), outputs
    print(
        f"agent-runner process, one turn of {PARALLEL_COMMANDS} parallel commands (1 MiB output each): "
        f"RSS before {before / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB (+{(peak - before) / 2**20:.1f} MiB), "
        f"turn {took:.2f} s"
    )


async def main(reads: int, commands: int) -> None:
    sandbox = Sandbox()
    # The service's defaults (agent-runner settings): 2 GiB a command, 10 GiB a workspace.
    limited = Sandbox(memory_bytes=2048 * MIB, disk_budget=DiskBudget(10_240 * MIB))
    for box in (sandbox, limited):
        reason = await box.probe()
        if reason is not None:
            raise SystemExit(f"sandbox unavailable: {reason}")
    folder = Path(tempfile.mkdtemp(prefix="popagent-bench-tools-"))
    try:
        scratch = Hands(folder.parent, sandbox).for_turn("bench", folder.name)
        repository = Hands(REPO_ROOT.parent, sandbox).for_turn("popagent", REPO_ROOT.name)
        await bench_read(folder, scratch, reads)
        await bench_grep(repository)
        await bench_command(
            scratch,
            Hands(folder.parent, limited).for_turn("bench", folder.name),
            Hands(REPO_ROOT.parent, limited).for_turn("popagent", REPO_ROOT.name),
            repository,
            commands,
        )
    finally:
        await sandbox.close()
        await limited.close()
        shutil.rmtree(folder, ignore_errors=True)
    await bench_memory()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="The workspace tools against baselines measured in the same run.")
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--commands", type=int, default=50)
    args = parser.parse_args()
    os.nice(0)
    asyncio.run(main(args.reads, args.commands))
