"""Added latency of a hook dispatch, against a bare HTTPS request to the same receiver in the same run.

The hooks service runs as its own process (as in production) with embedded PostgreSQL
and NATS; the caller uses `HooksClient` over gRPC; the receiver is the tests' loopback
HTTPS receiver with its test CA. Each round measures, back to back: one bare keep-alive
HTTPS POST of the same size, and one dispatch with 0, 1 and 5 matching handlers.

Target: p50 overhead <= 2 ms per handler over the bare request; 0 matching handlers
makes no RPC at all (the client's digest fast path).
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import httpcore

ROOT = Path(__file__).resolve().parents[1]
# The HTTPS receiver lives in tests/.
sys.path.insert(0, str(ROOT / "tests"))

from hooks.helpers import RecordingAuth  # noqa: E402

from popagent.hooks.v1 import hooks_pb2_grpc  # noqa: E402
from popagent_core.credentials import generate_credentials  # noqa: E402
from popagent_core.grpc_client import check_health  # noqa: E402
from popagent_dev import embedded  # noqa: E402
from popagent_hooks_client.client import HooksClient  # noqa: E402
from popagent_hooks_client.events import Event, Outcome  # noqa: E402
from support.https_receiver import HttpsReceiver, answer, make_secret  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_HOOKS_ROUNDS", "400"))
WARMUP = 50
TARGET_OVERHEAD_MS = 2.0
DETAIL = {"arguments": {"query": "weather in Lisbon", "limit": 5}}


def hooks_document(receiver: HttpsReceiver) -> str:
    handlers = [
        {
            "id": f"h{i}",
            "type": "http",
            "url": receiver.url(f"/h{i}"),
            "secret": make_secret(),
            "matcher": ["one", "five"] if i == 0 else ["five"],
        }
        for i in range(5)
    ]
    return json.dumps({"version": 1, "hooks": {"PreToolUse": handlers}})


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def timed(action: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await action()
    return (time.perf_counter() - started) * 1000


async def run(work: Path) -> int:
    tokens, callers = generate_credentials()
    with embedded.postgres(work / "pg") as dsn, embedded.nats(work / "nats") as nats:
        async with HttpsReceiver(work) as receiver:
            for i in range(5):
                receiver.script(f"/h{i}", answer("pass"))
            port = embedded.free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith("POPAGENT_")}
            env.update(
                {
                    "DATABASE_URL": dsn,
                    "NATS_URL": nats.url,
                    "POPAGENT_INTERNAL_CALLERS": callers,
                    "POPAGENT_HOOKS_ADDR": f"127.0.0.1:{port}",
                    "POPAGENT_HOOKS": hooks_document(receiver),
                    "POPAGENT_HOOK_ALLOWED_HOSTS": "127.0.0.1",
                    "POPAGENT_HOOK_ALLOW_PRIVATE_ADDRESSES": "true",
                    "POPAGENT_HOOK_CA_FILE": str(receiver.ca_file),
                    "POPAGENT_LOG_LEVEL": "WARNING",
                }
            )
            log = open(work / "hooks.log", "wb")  # noqa: ASYNC230, SIM115 - the child owns it
            service = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "popagent_hooks", env=env, stdout=log, stderr=log
            )
            counting = RecordingAuth(tokens["agent-runner"])
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", interceptors=[counting])
            context = ssl.create_default_context(cafile=str(receiver.ca_file))
            bare_pool = httpcore.AsyncConnectionPool(ssl_context=context)
            try:
                for _ in range(400):
                    if await check_health(channel, timeout_s=0.2):
                        break
                    if service.returncode is not None:
                        raise RuntimeError(f"hooks service exited: {(work / 'hooks.log').read_text()[-2000:]}")
                    await asyncio.sleep(0.05)
                client = HooksClient(hooks_pb2_grpc.HooksServiceStub(channel))
                body = json.dumps({"schemaVersion": 1, "event": "PreToolUse", "detail": DETAIL}).encode()

                async def bare() -> None:
                    response = await bare_pool.request(
                        "POST", receiver.url("/h0"), headers={"Content-Type": "application/json"}, content=body
                    )
                    assert response.status == 200

                def dispatch(target: str) -> Callable[[], Awaitable[object]]:
                    async def call() -> None:
                        decision = await client.dispatch(
                            Event.PRE_TOOL_USE, session_id="bench", turn_id="t", target=target, detail=DETAIL
                        )
                        assert decision.outcome is Outcome.PASS and decision.failure_class == ""

                    return call

                cases: dict[str, Callable[[], Awaitable[object]]] = {
                    "bare HTTPS request": bare,
                    "dispatch, 0 matching": dispatch("none"),
                    "dispatch, 1 matching": dispatch("one"),
                    "dispatch, 5 matching": dispatch("five"),
                }
                samples: dict[str, list[float]] = {name: [] for name in cases}
                for round_no in range(WARMUP + ROUNDS):
                    for name, action in cases.items():
                        elapsed = await timed(action)
                        if round_no >= WARMUP:
                            samples[name].append(elapsed)
                rpcs_before = len(counting.methods)
                for _ in range(100):
                    await dispatch("none")()
                rpcs_for_zero = len(counting.methods) - rpcs_before
            finally:
                await bare_pool.aclose()
                await channel.close()
                service.terminate()
                await asyncio.wait_for(service.wait(), timeout=15)
                log.close()

    bare_p50 = statistics.median(samples["bare HTTPS request"])
    print(f"hooks dispatch latency, {ROUNDS} rounds (+{WARMUP} warm-up), loopback HTTPS, keep-alive")
    print(f"{'case':<24}{'p50 ms':>9}{'p99 ms':>9}{'p50 ratio':>11}{'overhead/handler p50 ms':>26}")
    verdict = 0
    for name, values in samples.items():
        p50, p99 = statistics.median(values), percentile(values, 0.99)
        handlers = {"dispatch, 1 matching": 1, "dispatch, 5 matching": 5}.get(name, 0)
        ratio = p50 / (bare_p50 * handlers) if handlers else p50 / bare_p50
        overhead = f"{(p50 - handlers * bare_p50) / handlers:.3f}" if handlers else "-"
        print(f"{name:<24}{p50:>9.3f}{p99:>9.3f}{ratio:>10.2f}x{overhead:>26}")
        if handlers and (p50 - handlers * bare_p50) / handlers > TARGET_OVERHEAD_MS:
            verdict = 1
    print(f"RPCs made for 100 dispatches with 0 matching handlers: {rpcs_for_zero}")
    print(
        f"target p50 overhead <= {TARGET_OVERHEAD_MS} ms per handler: {'met' if verdict == 0 else 'MISSED'}; "
        f"0 matching -> no RPC: {'met' if rpcs_for_zero == 0 else 'MISSED'}"
    )
    return 0 if rpcs_for_zero == 0 else 1


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="popagent-bench-hooks-") as work:
        raise SystemExit(asyncio.run(run(Path(work))))


if __name__ == "__main__":
    main()
