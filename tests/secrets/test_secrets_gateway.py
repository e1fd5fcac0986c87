"""/api/secrets over real HTTP: gateway (uvicorn on a socket) -> real gRPC -> secrets service."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
import uvicorn
from secrets_support import resolve

from popagent_dev.embedded import free_port, wait_for_port
from popagent_gateway.app import create_app
from popagent_gateway.settings import Settings as GatewaySettings
from support.canary import assert_no_canary

API_KEY = "test-api-key-0123456789"
R = "popagent-user"


@pytest.fixture
async def api(secrets_service) -> AsyncIterator[httpx.AsyncClient]:  # type: ignore[no-untyped-def]
    values = {
        "DATABASE_URL": secrets_service.dsn,
        "OBSERVABILITY_DATABASE_URL": secrets_service.dsn,
        "POPAGENT_API_KEY": API_KEY,
        "POPAGENT_INTERNAL_TOKEN": secrets_service.tokens["gateway"],
        "POPAGENT_SECRETS_ADDR": secrets_service.address,
    }
    settings = GatewaySettings(**values)  # type: ignore[arg-type]
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_config=None, lifespan="on")
    )
    # The test owns the process's signals; the in-process server must not take them.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve())
    try:
        await asyncio.to_thread(wait_for_port, port)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers={"x-popagent-key": API_KEY}, timeout=10
        ) as client:
            yield client
    finally:
        server.should_exit = True
        await task


async def test_secret_lifecycle_over_http_never_returns_the_value(api, secrets_service, canary_secret) -> None:
    responses: list[httpx.Response] = []

    async def call(method: str, url: str, **kwargs) -> httpx.Response:  # type: ignore[no-untyped-def]
        response = await api.request(method, url, **kwargs)
        responses.append(response)
        return response

    put = await call("PUT", f"/api/secrets/{R}/github", json={"value": canary_secret})
    assert put.status_code == 200
    body = put.json()
    assert set(body) == {"resourceId", "name", "origins", "createdAt", "updatedAt"}
    assert (body["resourceId"], body["name"], body["origins"]) == (R, "github", [])

    bound = await call("POST", f"/api/secrets/{R}/github/origins", json={"origin": "https://GitHub.com"})
    assert bound.status_code == 200
    assert bound.json()["origins"] == ["https://github.com"]
    assert await resolve(secrets_service, R, "github", "https://github.com") == canary_secret

    rotated = await call("PUT", f"/api/secrets/{R}/github", json={"value": canary_secret + "-2"})
    assert rotated.status_code == 200
    assert rotated.json()["origins"] == ["https://github.com"]
    assert await resolve(secrets_service, R, "github", "https://github.com") == canary_secret + "-2"

    listed = await call("GET", "/api/secrets")
    assert listed.status_code == 200
    assert [s["name"] for s in listed.json()["secrets"]] == ["github"]
    assert (await call("GET", "/api/secrets", params={"resourceId": "nobody"})).json() == {"secrets": []}

    # Refusals, several carrying the canary: none may echo it.
    refusals = [
        (await call("PUT", f"/api/secrets/{R}/github", json={"value": canary_secret, "extra": 1}), 422),
        (await call("PUT", f"/api/secrets/{R}/github", json={"value": 12345}), 422),
        (await call("PUT", f"/api/secrets/{R}/github", json={"value": canary_secret * 300}), 422),
        (await call("PUT", f"/api/secrets/{R}/github", json={"value": ""}), 422),
        (await call("PUT", f"/api/secrets/{R}/github", content=b'{"value": "' + b"x" * 2_000_000 + b'"}'), 413),
        (await call("PUT", f"/api/secrets/{R}/bad%20name", json={"value": canary_secret}), 400),
        (await call("POST", f"/api/secrets/{R}/github/origins", json={"origin": "http://github.com"}), 400),
        (
            await call("POST", f"/api/secrets/{R}/github/origins", json={"origin": f"https://a.com/{canary_secret}"}),
            400,
        ),
        (await call("POST", f"/api/secrets/{R}/missing/origins", json={"origin": "https://a.com"}), 404),
        (await call("DELETE", f"/api/secrets/{R}/github/origins", params={"origin": "https://other.com"}), 404),
        (
            await call(
                "PUT", f"/api/secrets/{R}/github", json={"value": canary_secret}, headers={"x-popagent-key": ""}
            ),
            401,
        ),
    ]
    for response, status in refusals:
        assert response.status_code == status, (response.request.url, response.text)
        assert "error" in response.json()

    unbound = await call("DELETE", f"/api/secrets/{R}/github/origins", params={"origin": "https://github.com"})
    assert unbound.status_code == 200
    assert unbound.json()["origins"] == []
    deleted = await call("DELETE", f"/api/secrets/{R}/github")
    assert deleted.status_code == 204
    assert (await call("DELETE", f"/api/secrets/{R}/github")).status_code == 404
    assert (await call("GET", "/api/secrets")).json() == {"secrets": []}

    assert len(responses) > 15
    for response in responses:
        assert_no_canary(response.content, canary_secret, f"{response.request.method} {response.request.url.path}")
        assert_no_canary(repr(response.headers.multi_items()), canary_secret, "response headers")
