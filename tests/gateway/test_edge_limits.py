"""The edge as `make run` serves it, against a hostile client and in a browser's eyes: request
heads are bounded (431 at once, keyless or not, however large the head), every answer carries
the browser guards (CSP, no framing, no sniffing), and /docs, whose page loads Swagger UI from
a public CDN, is off unless a setting asks for it. Over real sockets to the real
`python -m popagent_gateway` process, serving the built UI when there is one."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from popagent_core.credentials import generate_credentials
from popagent_core.settings import load_settings
from popagent_dev.embedded import free_port, terminate
from popagent_gateway.app import create_app
from popagent_gateway.settings import Settings
from popagent_gateway.ui import DEFAULT_UI_DIR
from support.waiting import START_WITHIN_S, eventually

API_KEY = "h" * 32
MIB = 1024 * 1024
BASE_ENVIRONMENT = {
    "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
    "OBSERVABILITY_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
    "POPAGENT_API_KEY": API_KEY,
}


def start_gateway(tmp_path: Path, port: int) -> subprocess.Popen[bytes]:
    tokens, _ = generate_credentials()
    environment = (
        os.environ
        | BASE_ENVIRONMENT
        | {
            "POPAGENT_INTERNAL_TOKEN": tokens["gateway"],
            "POPAGENT_AGENT_RUNNER_ADDR": f"127.0.0.1:{free_port()}",
            "POPAGENT_GATEWAY_PORT": str(port),
            "POPAGENT_UI_DIR": str(DEFAULT_UI_DIR),
        }
    )
    with (tmp_path / "gateway.log").open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "popagent_gateway"], env=environment, stdout=out, stderr=subprocess.STDOUT
        )


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[str]:
    """A gateway process of the test's own."""
    async with served_gateway(tmp_path) as url:
        yield url


@pytest.fixture(scope="module")
async def shared_gateway(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """One gateway process for the module's tests, which each send requests of their own and read
    only their answers: each start costs seconds of a core (a minute on a loaded machine)."""
    async with served_gateway(tmp_path_factory.mktemp("shared-gateway")) as url:
        yield url


@contextlib.asynccontextmanager
async def served_gateway(tmp_path: Path) -> AsyncIterator[str]:
    port = free_port()
    process = start_gateway(tmp_path, port)
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(timeout=30) as client:

            async def answers() -> bool:
                try:
                    return (await client.get(f"{url}/openapi.json")).status_code == 200
                except httpx.TransportError:
                    return False

            await eventually(answers, within=START_WITHIN_S, interval=0.1, what="the gateway to answer")
        yield url
    finally:
        terminate(process, 15)


async def send_head(url: str, header_bytes: int) -> tuple[bytes, float]:
    """A keyless request whose head carries one header of `header_bytes`: what the gateway
    answered before it closed the connection, and how long that took. A client still sending
    when the gateway closes reads a reset, not the 431 (TCP discards it): empty."""
    host, port = url.removeprefix("http://").split(":")
    began = time.monotonic()
    reader, writer = await asyncio.open_connection(host, int(port))
    received = b""
    try:
        writer.write(b"GET /api/sessions HTTP/1.1\r\nHost: gateway\r\nX-Padding: ")
        chunk = b"a" * min(header_bytes, MIB)
        with contextlib.suppress(ConnectionError):
            for _ in range(header_bytes // len(chunk)):
                writer.write(chunk)
                await writer.drain()
            writer.write(b"\r\n\r\n")
            await writer.drain()
        with contextlib.suppress(ConnectionError):
            while piece := await asyncio.wait_for(reader.read(65536), timeout=10):
                received += piece
    finally:
        writer.close()
    return received, time.monotonic() - began


def refused(answer: bytes) -> bool:
    """431, or closed before it could be read; never the app's answer (its 401)."""
    return answer == b"" or answer.startswith(b"HTTP/1.1 431 ")


async def test_an_oversized_head_is_refused_at_once(shared_gateway: str) -> None:
    gateway = shared_gateway
    # Past the bound, yet small enough that the gateway reads all of it: the client reads the 431.
    answer, _ = await send_head(gateway, 48 * 1024)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    # 8 MiB: refused once the first 32 KiB are in, the app (and its key check) never sees it.
    answer, took = await send_head(gateway, 8 * MIB)
    assert refused(answer), answer[:200]
    assert took < 3, took
    # A head within the bound still reaches the app (its key check: 401).
    async with httpx.AsyncClient(base_url=gateway) as client:
        response = await client.get("/api/sessions", headers={"x-padding": "a" * 16_000})
        assert response.status_code == 401


async def test_huge_heads_do_not_stall_other_requests(shared_gateway: str) -> None:
    gateway = shared_gateway
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as client:
        attackers = [asyncio.create_task(send_head(gateway, 40 * MIB)) for _ in range(4)]
        slowest = 0.0
        while not all(attacker.done() for attacker in attackers):
            began = time.monotonic()
            assert (await client.get("/")).status_code == 200
            slowest = max(slowest, time.monotonic() - began)
            await asyncio.sleep(0.05)
        for answer, took in await asyncio.gather(*attackers):
            assert refused(answer), answer[:200]
            assert took < 5, took
        assert slowest < 1.0, slowest


async def test_every_answer_carries_the_browser_guards(shared_gateway: str) -> None:
    gateway = shared_gateway
    async with httpx.AsyncClient(base_url=gateway) as client:
        page = await client.get("/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        asset = await client.get(page.text.split('src="', 1)[1].split('"', 1)[0])
        refused = await client.get("/api/sessions")
        assert asset.status_code == 200 and refused.status_code == 401
        for answer in (page, asset, refused):
            policy = answer.headers["content-security-policy"]
            assert "script-src 'self';" in policy and "frame-ancestors 'none'" in policy, policy
            assert "img-src 'self' data: blob:;" in policy
            assert answer.headers["x-frame-options"] == "DENY"
            assert answer.headers["x-content-type-options"] == "nosniff"
        # Swagger UI and ReDoc load from a CDN: not served unless asked for; the document is.
        assert (await client.get("/docs")).status_code == 404
        assert (await client.get("/redoc")).status_code == 404
        assert (await client.get("/openapi.json")).status_code == 200


def test_docs_are_served_when_asked_for_under_their_own_policy() -> None:
    settings = Settings(**BASE_ENVIRONMENT, POPAGENT_GATEWAY_DOCS="true", POPAGENT_UI_DIR="/nonexistent")  # type: ignore[arg-type]
    client = TestClient(create_app(settings))
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger-ui" in docs.text
    policy = docs.headers["content-security-policy"]
    assert "https://cdn.jsdelivr.net" in policy and "frame-ancestors 'none'" in policy
    # The CDN is allowed on that page only.
    assert "cdn.jsdelivr.net" not in client.get("/openapi.json").headers["content-security-policy"]


@pytest.mark.parametrize(
    ("variable", "value"),
    [("POPAGENT_GATEWAY_MAX_HEAD_BYTES", "100"), ("POPAGENT_GATEWAY_DOCS", "sometimes")],
)
def test_a_bad_setting_is_one_line_at_start(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, setting in (BASE_ENVIRONMENT | {variable: value}).items():
        monkeypatch.setenv(name, setting)
    with pytest.raises(SystemExit) as exited:
        load_settings(Settings, "gateway")
    assert exited.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("popagent-gateway: bad configuration:") and variable in line, line
