"""The launcher's per-service log files are written line by line (issue 22, finding 6): a
line is in the file as soon as the child printed it, not when 8 KB have gathered."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from popagent_core.topology import service_named
from popagent_dev.launcher import Child, Stack, StackConfig
from support.waiting import eventually


async def test_a_child_line_reaches_its_log_file_at_once(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    stack = Stack(StackConfig(data_dir=tmp_path, echo_logs=False, runner_workers=1))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import time; print('first line', flush=True); time.sleep(30)",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    child = Child("probe", process, service_named("tasks"), {})
    pump = asyncio.create_task(stack._pump(child))  # pyright: ignore[reportPrivateUsage]
    try:
        log = tmp_path / "logs" / "probe.log"
        await eventually(
            lambda: log.exists() and log.read_text() == "first line\n", within=5, what="the line in the file"
        )
    finally:
        process.kill()
        await process.wait()
        await asyncio.wait_for(pump, 5)


async def test_a_crash_looping_child_is_left_stopped_and_a_restart_request_starts_it_again(tmp_path: Path) -> None:
    """The supervisor's limit: CRASH_LOOP_LIMIT restarts within the window, then it gives up
    on that child (the stack stays up), and `restart <name>` (SIGUSR1) tries again."""
    from popagent_core.topology import Service
    from popagent_dev.launcher import CRASH_LOOP_LIMIT, RESTART_REQUESTS

    (tmp_path / "logs").mkdir()
    stack = Stack(StackConfig(data_dir=tmp_path, echo_logs=False, runner_workers=1, restart_base_s=0.01))
    # `python -m this` prints and exits at once: a child that dies as soon as it starts.
    crashing = Service("crasher", "this", None, None)
    await stack._spawn("crasher", crashing, {})  # pyright: ignore[reportPrivateUsage]
    supervisor = asyncio.create_task(stack._supervise())  # pyright: ignore[reportPrivateUsage]
    try:
        await eventually(lambda: stack.children["crasher"].state == "failed", within=20, what="the crash loop")
        child = stack.children["crasher"]
        assert len(child.restarts) == CRASH_LOOP_LIMIT
        state = json.loads(stack.state_path.read_text())["children"]["crasher"]
        assert (state["state"], state["lastExit"]) == ("failed", 0)
        (tmp_path / RESTART_REQUESTS).write_text("crasher\n")
        stack.restart_requested()
        await eventually(lambda: stack.children["crasher"] is not child, within=5, what="a new start")
    finally:
        await stack.stop_children(timeout_s=2)
        supervisor.cancel()
