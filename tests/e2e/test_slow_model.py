"""A model that is silent for 255 s before its first byte still answers: through `make run` (the
launcher's gateway, directly) and through the production edge (HAProxy with deploy/haproxy/haproxy.cfg,
its backend pointed at that gateway). Nothing on the way may cut a quiet turn: not the model
client's read timeout, not the gRPC stream, not the proxy's timeouts (`timeout server` is what
applies while the client only reads)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from popagent_dev.embedded import free_port
from support.launcher import Launched, launch, start_model_server
from support.sse import read_sse

REPO = Path(__file__).resolve().parents[2]
HAPROXY_CONFIG = REPO / "deploy" / "haproxy" / "haproxy.cfg"
SILENCE_S = 255
ANSWER = "Answered after a long silence."

pytestmark = [pytest.mark.slow, pytest.mark.timeout(SILENCE_S + 240), pytest.mark.xdist_group("slow-model")]


def edge_config(gateway_port: int, listen_port: int) -> str:
    """The production HAProxy configuration, unchanged but for where it listens and where the gateway is
    (compose's DNS name and resolver do not exist here)."""
    text = HAPROXY_CONFIG.read_text()
    text, binds = re.subn(r"(?m)^(\s*)bind :8080$", rf"\1bind 127.0.0.1:{listen_port}", text)
    text, servers = re.subn(
        r"(?m)^(\s*)server gateway gateway:8080 .*$", rf"\1server gateway 127.0.0.1:{gateway_port}", text
    )
    text, resolvers = re.subn(r"(?ms)^resolvers docker\n(?:[ \t]+.*\n?)*", "", text)
    assert (binds, servers, resolvers) == (1, 1, 1), "deploy/haproxy/haproxy.cfg changed shape: update this test"
    return text.replace("log stdout format raw local0 notice", "log stderr format raw local0 notice")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    base = tmp_path_factory.mktemp("slow-model")
    models, models_url = start_model_server(base, {"text": ANSWER, "first_byte_delay_s": SILENCE_S})
    launched = launch(base, {"NINEROUTER_URL": models_url})
    try:
        launched.wait_running()
        yield launched
    finally:
        launched.stop()
        models.terminate()
        models.wait(10)


@pytest.fixture(scope="module")
def edge(stack: Launched, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    config = tmp_path_factory.mktemp("edge") / "haproxy.cfg"
    config.write_text(edge_config(int(stack.url.rsplit(":", 1)[1]), port))
    proxy = subprocess.Popen(["haproxy", "-db", "-f", str(config)], stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                httpx.get(f"{url}/api/health", timeout=1)
                break
            except httpx.TransportError:
                if proxy.poll() is not None:
                    raise AssertionError(f"haproxy exited: {proxy.stderr.read() if proxy.stderr else ''}") from None
                subprocess.run(["sleep", "0.1"], check=True)
        yield url
    finally:
        proxy.terminate()
        proxy.wait(10)


async def chat(url: str, api_key: str) -> list[object]:
    async with httpx.AsyncClient(base_url=url, headers={"x-popagent-key": api_key}, timeout=None) as client:
        created = await client.post("/api/sessions", json={"title": "slow model"})
        assert created.status_code == 201, created.text
        body = {
            "id": created.json()["id"],
            "message": {"id": f"u-{uuid.uuid4().hex}", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
        }
        async with client.stream("POST", "/api/chat", json=body) as response:
            assert response.status_code == 200, await response.aread()
            return await read_sse(response)


def answer_of(chunks: list[object]) -> str:
    return "".join(c["delta"] for c in chunks if isinstance(c, dict) and c.get("type") == "text-delta")


async def test_a_model_silent_for_255_s_still_answers_directly_and_through_the_edge(stack: Launched, edge: str) -> None:
    direct, through_edge = await asyncio.gather(chat(stack.url, stack.api_key), chat(edge, stack.api_key))
    for chunks in (direct, through_edge):
        assert answer_of(chunks) == ANSWER, chunks[-3:]
        assert chunks[-1] == "[DONE]"
