"""Child processes the launcher, the test harness and the benches start (`embedded.orphan_safe`)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from popagent_dev.embedded import free_port, orphan_safe
from support.waiting import wait_until


async def test_children_start_cleanly_while_this_process_has_busy_grpc_channels() -> None:
    # grpc/grpc#43055: a child that runs Python between fork and exec (a preexec_fn) while the
    # parent has live gRPC channels is killed by gRPC's fork handlers (SIGABRT) before its exec.
    # Started through orphan_safe, no child runs Python before exec: all of them start.
    address = f"127.0.0.1:{free_port()}"
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(HealthServicer(), server)
    server.add_insecure_port(address)
    await server.start()
    channel = grpc.aio.insecure_channel(address)
    stub: Any = health_pb2_grpc.HealthStub(channel)  # the generated stub declares no attributes
    stopping = asyncio.Event()

    async def busy() -> None:
        while not stopping.is_set():
            await stub.Check(health_pb2.HealthCheckRequest())

    load = asyncio.create_task(busy())
    try:
        codes = []
        for _ in range(60):
            child = await asyncio.create_subprocess_exec(*orphan_safe([sys.executable, "-c", "pass"]))
            codes.append(await child.wait())
    finally:
        stopping.set()
        await load
        await channel.close()
        await server.stop(None)
    assert codes == [0] * 60


def test_a_child_gets_sigterm_when_its_parent_is_killed() -> None:
    # The parent starts a long sleeper through orphan_safe, prints its pid, and is SIGKILLed.
    parent_code = (
        "import subprocess, sys, time\n"
        "from popagent_dev.embedded import orphan_safe\n"
        "child = subprocess.Popen(orphan_safe([sys.executable, '-c', 'import time; time.sleep(120)']))\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = psutil.Process(int(parent.stdout.readline()))
        # setpriv sets the death signal, then becomes the sleeper: a parent killed before that
        # (the child's first milliseconds, on a busy machine) would leave it without one.
        wait_until(
            child.name,
            until=lambda name: name != "setpriv",
            within=10,
            interval=0.01,
            what="the child to start its command",
        )
        parent.kill()
        parent.wait(10)
        try:
            child.wait(10)
        except psutil.TimeoutExpired:
            raise AssertionError("the child outlived its killed parent") from None
    finally:
        if parent.poll() is None:
            parent.kill()
