"""The launcher's per-service log files are written line by line (issue 22, finding 6): a
line is in the file as soon as the child printed it, not when 8 KB have gathered."""

from __future__ import annotations

import asyncio
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
