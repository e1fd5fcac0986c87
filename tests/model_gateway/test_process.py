"""`python -m support.model_gateway`: the same server as a process, for benchmarks and e2e stacks."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import httpx
import pytest

from support import model_gateway

TESTS_DIR = Path(__file__).resolve().parents[1]


async def start(*args: str) -> tuple[asyncio.subprocess.Process, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "support.model_gateway",
        *args,
        cwd=TESTS_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    line = (await asyncio.wait_for(process.stdout.readline(), timeout=20)).decode()
    assert line.startswith("model gateway listening on http://127.0.0.1:"), line
    return process, line.split(" on ", 1)[1].strip()


async def stop(process: asyncio.subprocess.Process, sig: signal.Signals = signal.SIGTERM) -> tuple[int, str]:
    process.send_signal(sig)
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=5)
    assert process.returncode is not None
    return process.returncode, stderr.decode()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_json_script_is_served_in_a_loop_until_a_signal_stops_the_process(tmp_path, sig):
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "models": [{"id": "bench/model", "context_length": 8192, "max_completion_tokens": 512}],
                "turns": [
                    {"text": "first", "chunk_size": 2},
                    {"tool_calls": [{"name": "getTime", "arguments": {"tz": "UTC"}, "id": "c9"}]},
                ],
            }
        )
    )
    process, url = await start("--port", "0", "--script", str(script), "--api-key", "k", "--loop")
    try:
        async with httpx.AsyncClient(headers={"Authorization": "Bearer k"}) as client:
            models = (await client.get(f"{url}/models")).json()
            replies = []
            for _ in range(3):
                body = {"model": "bench/model", "messages": [{"role": "user", "content": "x"}], "stream": False}
                replies.append((await client.post(f"{url}/chat/completions", json=body)).json())
            unauthorized = await client.post(f"{url}/chat/completions", json={}, headers={"Authorization": "Bearer no"})
    finally:
        returncode, stderr = await stop(process, sig)

    assert [m["id"] for m in models["data"]] == ["bench/model"]
    messages = [r["choices"][0]["message"] for r in replies]
    assert [m["content"] for m in messages] == ["first", None, "first"]
    assert messages[1]["tool_calls"][0]["id"] == "c9"
    assert unauthorized.status_code == 401
    assert returncode == 0, stderr


async def test_a_callable_script_is_named_by_module_and_function():
    # Any importable callable works; this module's own helper keeps the test self-contained.
    process, url = await start("--script", "model_gateway.test_process:echo_responder")
    try:
        async with httpx.AsyncClient() as client:
            body = {"model": "m", "messages": [{"role": "user", "content": "ping"}], "stream": False}
            reply = (await client.post(f"{url}/chat/completions", json=body)).json()
    finally:
        returncode, stderr = await stop(process)

    assert reply["choices"][0]["message"]["content"] == "echo: ping"
    assert returncode == 0, stderr


def echo_responder(body: dict) -> model_gateway.Turn:
    return model_gateway.Turn.say(f"echo: {body['messages'][-1]['content']}")
