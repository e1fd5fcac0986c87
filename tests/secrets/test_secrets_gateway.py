"""/api/secrets over real HTTP: gateway (uvicorn on a socket) -> real gRPC -> secrets service."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
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


def _provision(value: str, name: str = "github", resource_id: str = R) -> dict[str, object]:
    return {"resourceId": resource_id, "name": name, "value": value}


async def test_secret_lifecycle_over_http_never_returns_the_value(api, secrets_service, canary_secret) -> None:
    responses: list[httpx.Response] = []

    async def call(method: str, url: str, **kwargs) -> httpx.Response:  # type: ignore[no-untyped-def]
        response = await api.request(method, url, **kwargs)
        responses.append(response)
        return response

    created = await call("POST", "/api/secrets", json=_provision(canary_secret))
    assert created.status_code == 201
    body = created.json()
    assert set(body) == {"id", "resourceId", "name", "origins", "createdAt", "updatedAt"}
    assert (body["resourceId"], body["name"], body["origins"]) == (R, "github", [])
    secret_id = body["id"]

    bound = await call("POST", f"/api/secrets/{R}/github/origins", json={"origin": "https://GitHub.com"})
    assert bound.status_code == 200
    assert bound.json()["origins"] == ["https://github.com"]
    assert await resolve(secrets_service, R, "github", "https://github.com") == canary_secret

    # The same resource and name rotate the existing secret: 200, same id, bindings kept.
    rotated = await call("POST", "/api/secrets", json=_provision(canary_secret + "-2"))
    assert rotated.status_code == 200
    assert rotated.json()["id"] == secret_id
    assert rotated.json()["origins"] == ["https://github.com"]
    assert rotated.json()["createdAt"] == body["createdAt"]
    assert await resolve(secrets_service, R, "github", "https://github.com") == canary_secret + "-2"
    # Another resource with the same name is another secret.
    other = await call("POST", "/api/secrets", json=_provision(canary_secret, resource_id="agent-7"))
    assert other.status_code == 201
    assert other.json()["id"] != secret_id

    listed = await call("GET", "/api/secrets")
    assert listed.status_code == 200
    assert [(s["resourceId"], s["name"]) for s in listed.json()["secrets"]] == [("agent-7", "github"), (R, "github")]
    assert [s["id"] for s in (await call("GET", "/api/secrets", params={"resourceId": R})).json()["secrets"]] == [
        secret_id
    ]
    assert (await call("GET", "/api/secrets", params={"resourceId": "nobody"})).json() == {"secrets": []}

    # Refusals, several carrying the canary: none may echo it.
    refusals = [
        (await call("POST", "/api/secrets", json={**_provision(canary_secret), "extra": 1}), 422),
        (await call("POST", "/api/secrets", json=_provision(12345)), 422),  # type: ignore[arg-type]
        (await call("POST", "/api/secrets", json=_provision(canary_secret * 300)), 422),
        (await call("POST", "/api/secrets", json=_provision("")), 422),
        (await call("POST", "/api/secrets", json={"name": "github", "value": canary_secret}), 422),
        (await call("POST", "/api/secrets", json={**_provision(canary_secret), "resource_id": R}), 422),
        (await call("POST", "/api/secrets", content=b'{"value": "' + b"x" * 2_000_000 + b'"}'), 413),
        # The document's name and origin patterns: refused at the gateway, 422 naming the field.
        (await call("POST", "/api/secrets", json=_provision(canary_secret, name="bad name")), 422),
        (await call("POST", f"/api/secrets/{R}/github/origins", json={"origin": "http://github.com"}), 422),
        (
            await call("POST", f"/api/secrets/{R}/github/origins", json={"origin": f"https://a.com/{canary_secret}"}),
            422,
        ),
        (await call("POST", f"/api/secrets/{R}/missing/origins", json={"origin": "https://a.com"}), 404),
        (await call("DELETE", f"/api/secrets/{R}/github/origins", params={"origin": "https://other.com"}), 404),
        (await call("DELETE", "/api/secrets/not-a-secret-id"), 422),
        (await call("DELETE", "/api/secrets/00000000-0000-4000-8000-000000000000"), 404),
        (await call("POST", "/api/secrets", json=_provision(canary_secret), headers={"x-popagent-key": ""}), 401),
        (await call("DELETE", f"/api/secrets/{secret_id}", headers={"x-popagent-key": ""}), 401),
    ]
    for response, status in refusals:
        assert response.status_code == status, (response.request.url, response.text)
        assert "error" in response.json()

    unbound = await call("DELETE", f"/api/secrets/{R}/github/origins", params={"origin": "https://github.com"})
    assert unbound.status_code == 200
    assert unbound.json()["origins"] == []
    deleted = await call("DELETE", f"/api/secrets/{other.json()['id']}")
    assert deleted.status_code == 204
    assert (await call("DELETE", f"/api/secrets/{other.json()['id']}")).status_code == 404
    assert [s["id"] for s in (await call("GET", "/api/secrets")).json()["secrets"]] == [secret_id]

    assert len(responses) > 20
    for response in responses:
        assert_no_canary(response.content, canary_secret, f"{response.request.method} {response.request.url.path}")
        assert_no_canary(repr(response.headers.multi_items()), canary_secret, "response headers")


async def test_deleting_a_secret_by_id_removes_its_origin_bindings(api, secrets_service) -> None:
    created = (await api.post("/api/secrets", json=_provision("first-value"))).json()
    await api.post(f"/api/secrets/{R}/github/origins", json={"origin": "https://github.com"})
    assert await resolve(secrets_service, R, "github", "https://github.com") == "first-value"

    assert (await api.delete(f"/api/secrets/{created['id']}")).status_code == 204
    assert (await api.get("/api/secrets")).json() == {"secrets": []}
    # Provisioning the name again makes a new secret that inherits no binding of the deleted one.
    again = await api.post("/api/secrets", json=_provision("second-value"))
    assert again.status_code == 201
    assert again.json()["id"] != created["id"]
    assert again.json()["origins"] == []
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await resolve(secrets_service, R, "github", "https://github.com")
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_the_spec_routes_are_in_the_openapi_document() -> None:
    from popagent_gateway.openapi import document

    openapi: dict[str, Any] = document()
    paths = openapi["paths"]
    secrets = {
        (method.upper(), path) for path, item in paths.items() if path.startswith("/api/secrets") for method in item
    }
    assert secrets == {
        ("GET", "/api/secrets"),
        ("POST", "/api/secrets"),
        ("DELETE", "/api/secrets/{secret_id}"),
        ("POST", "/api/secrets/{resource_id}/{name}/origins"),
        ("DELETE", "/api/secrets/{resource_id}/{name}/origins"),
    }
    provision = paths["/api/secrets"]["post"]
    assert {"200", "201"} <= set(provision["responses"])
    assert provision["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/SecretProvision"
    }
    assert "204" in paths["/api/secrets/{secret_id}"]["delete"]["responses"]
    # Write-only: no response shape has a field for the value.
    schemas = openapi["components"]["schemas"]
    assert "value" not in schemas["SecretOut"]["properties"]
    assert set(schemas["SecretProvision"]["required"]) == {"resourceId", "name", "value"}
