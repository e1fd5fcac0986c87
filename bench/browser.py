"""bifrostNavigator's added latency against a bare MCP client over the same socket, same run.

The real browser server (`@playwright/mcp` driving Debian's chromium, tests/browser_peer) behind
its 0600 Unix socket (tests/support/browser_peer.py), one login page open, then alternately:

- bare: `browser_snapshot` from a plain `mcp` client session over the socket;
- bridge: the same operation as agent-runner makes it, `BrowserNavigatorService.Navigate` over
  real gRPC to browser-bridge (settings check, access table, jsonschema validation against the
  live catalog, the secret scrubber with a bound secret loaded, the session's tab, the MCP call).

browser-bridge runs as its own process (as `make run` starts it), the secrets service in this
one, on embedded PostgreSQL and NATS.
Both paths talk to the same browser, so the server's own time cancels out of the difference.
Target: <= 5 ms p50 added.

    .venv/bin/python bench/browser.py [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from popagent.browser_bridge.v1 import (  # noqa: E402
    browser_bridge_pb2,
    browser_bridge_pb2_grpc,
    navigator_pb2,
    navigator_pb2_grpc,
)
from popagent.secrets.v1 import secrets_pb2, secrets_pb2_grpc  # noqa: E402
from popagent_core.credentials import generate_credentials  # noqa: E402
from popagent_core.grpc_client import check_health, open_channel  # noqa: E402
from popagent_dev import embedded  # noqa: E402
from popagent_dev.embedded import free_port  # noqa: E402
from popagent_secrets.service import build as build_secrets  # noqa: E402
from popagent_secrets.settings import Settings as SecretsSettings  # noqa: E402
from support.browser_peer import SOCKET_HOST, LoginSite, browser_peer  # noqa: E402


def p50_p95(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.95) - 1]


async def main(calls: int) -> None:
    with tempfile.TemporaryDirectory(prefix="pa-bench-browser-") as folder:
        base = Path(folder)
        with embedded.postgres(base / "pg") as admin_dsn, embedded.nats(base / "nats") as nats:
            dsn = await embedded.ensure_database(admin_dsn, "popagent_bench_browser")
            tokens, callers = generate_credentials()
            common = {"DATABASE_URL": dsn, "NATS_URL": nats.url, "POPAGENT_INTERNAL_CALLERS": callers}
            secrets_addr, bridge_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
            async with contextlib.AsyncExitStack() as stack:
                site = await stack.enter_async_context(LoginSite())
                # The socket is served by a process of its own, as BifrOSt's is: served by this
                # process's loop, the bare client would skip the wake-up of another process that
                # every bridge call pays at the socket.
                peer = await stack.enter_async_context(browser_peer(base, relay_process=True))
                secrets_env: dict[str, str] = {
                    **common,
                    "POPAGENT_INTERNAL_TOKEN": tokens["secrets"],
                    "POPAGENT_SECRETS_ADDR": secrets_addr,
                    "POPAGENT_SECRET_KEY": base64.b64encode(os.urandom(32)).decode(),
                }
                await stack.enter_async_context(build_secrets(SecretsSettings(**secrets_env)))  # type: ignore[arg-type]
                # browser-bridge as its own process, as `make run` starts it.
                bridge_env = {
                    **os.environ,
                    **common,
                    "POPAGENT_INTERNAL_TOKEN": tokens["browser-bridge"],
                    "POPAGENT_BROWSER_BRIDGE_ADDR": bridge_addr,
                    "POPAGENT_SECRETS_ADDR": secrets_addr,
                    "POPAGENT_BROWSER_SOCKET": str(peer.socket_path),
                    "POPAGENT_LOG_LEVEL": "WARNING",
                }
                process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "popagent_browser_bridge", env=bridge_env
                )
                stack.push_async_callback(process.wait)
                stack.callback(process.terminate)
                gateway = await stack.enter_async_context(open_channel(secrets_addr, tokens["gateway"]))
                secrets = secrets_pb2_grpc.SecretsServiceStub(gateway)
                await secrets.PutSecret(
                    secrets_pb2.PutSecretRequest(resource_id="popagent-user", name="pw", value="bench-" + "s" * 24)
                )
                await secrets.BindOrigin(
                    secrets_pb2.BindOriginRequest(
                        resource_id="popagent-user", name="pw", origin=site.url("").rstrip("/")
                    )
                )
                settings_channel = await stack.enter_async_context(open_channel(bridge_addr, tokens["gateway"]))
                while not await check_health(settings_channel, timeout_s=0.5):
                    if process.returncode is not None:
                        raise SystemExit("browser-bridge exited")
                    await asyncio.sleep(0.1)
                await browser_bridge_pb2_grpc.BrowserBridgeServiceStub(settings_channel).UpdateBrowserSettings(
                    browser_bridge_pb2.UpdateBrowserSettingsRequest(enabled=True)
                )
                runner = await stack.enter_async_context(open_channel(bridge_addr, tokens["agent-runner"]))
                navigator = navigator_pb2_grpc.BrowserNavigatorServiceStub(runner)

                def request(operation: str, arguments: str) -> navigator_pb2.NavigateRequest:
                    return navigator_pb2.NavigateRequest(
                        session_id="bench",
                        agent_id="popagent",
                        browser_access="interactive",
                        operation=operation,
                        arguments_json=arguments,
                    )

                await navigator.Navigate(request("browser_navigate", f'{{"url": "{site.url("/login")}"}}'), timeout=60)
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(uds=str(peer.socket_path)), timeout=60)
                )
                read, write = await stack.enter_async_context(
                    streamable_http_client(f"http://{SOCKET_HOST}/mcp", http_client=http)
                )
                # A second MCP session is a second browser: open the same page there.
                bare = await stack.enter_async_context(ClientSession(read, write))
                await bare.initialize()
                await bare.call_tool("browser_navigate", {"url": site.url("/login")})

                bare_ms: list[float] = []
                bridge_ms: list[float] = []
                hop_ms: list[float] = []
                snapshot = request("browser_snapshot", "{}")
                health = navigator_pb2.GetHealthRequest()
                for i in range(calls + 10):
                    start = time.perf_counter()
                    await bare.call_tool("browser_snapshot", {})
                    bare_time = (time.perf_counter() - start) * 1000
                    start = time.perf_counter()
                    await navigator.Navigate(snapshot, timeout=60)
                    bridge_time = (time.perf_counter() - start) * 1000
                    # The floor of the hop: a gRPC round trip to browser-bridge that does no work.
                    start = time.perf_counter()
                    await navigator.GetHealth(health, timeout=60)
                    hop_time = (time.perf_counter() - start) * 1000
                    if i >= 10:  # warm-up
                        bare_ms.append(bare_time)
                        bridge_ms.append(bridge_time)
                        hop_ms.append(hop_time)
            bare_p50, bare_p95 = p50_p95(bare_ms)
            bridge_p50, bridge_p95 = p50_p95(bridge_ms)
            added = [b - a for a, b in zip(bare_ms, bridge_ms, strict=True)]
            print(f"browser_snapshot, {calls} calls each, alternating")
            print(f"  bare mcp client : p50 {bare_p50:7.2f} ms  p95 {bare_p95:7.2f} ms")
            print(f"  bifrostNavigator: p50 {bridge_p50:7.2f} ms  p95 {bridge_p95:7.2f} ms")
            print(f"  gRPC hop floor  : p50 {statistics.median(hop_ms):7.2f} ms  (GetHealth round trip, same channel)")
            print(
                f"  added           : p50 {statistics.median(added):7.2f} ms  (target <= 5 ms)  ratio {bridge_p50 / bare_p50:.2f}x"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.calls))
