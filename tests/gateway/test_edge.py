"""The gateway edge: every /api route behind the key, bounded bodies, one error table."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import pytest
from fastapi import FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, RouteContext, iter_route_contexts
from fastapi.testclient import TestClient
from opentelemetry.trace import SpanKind

from gateway.harness import offline_settings
from popagent_core.errors import HTTP_STATUS_BY_GRPC_CODE, NotFound, PopagentError
from popagent_gateway.app import create_app
from popagent_gateway.bounded import KEYLESS_API_PATHS, platform_signed
from popagent_gateway.deps import require_api_key
from popagent_gateway.errors import DEPENDENCY_TEXTS, EDGE_STATUS_BY_GRPC_CODE, client_message
from popagent_gateway.settings import Settings
from support.tracing import collecting_spans

API_KEY = "k" * 32


def make_settings(**overrides: object) -> Settings:
    return offline_settings(API_KEY, **overrides)


def _depends_on(dependant: Dependant, target: object) -> bool:
    return any(d.call is target or _depends_on(d, target) for d in dependant.dependencies)


def api_routes(app: FastAPI) -> list[RouteContext]:
    """Every effective route under /api, including those of included routers (with their
    inherited dependencies): FastAPI resolves included routers lazily, so `app.routes`
    alone does not list them."""
    return [
        r
        for r in iter_route_contexts(app.routes)
        if isinstance(r.original_route, APIRoute)
        and (r.path or "").startswith("/api")
        and (r.path or "") not in KEYLESS_API_PATHS
        # A channel's webhook is signed by its platform instead (tests/channels: 401 without it).
        and not platform_signed((r.path or "").replace("{channel_id}", "c1"))
    ]


@pytest.fixture(scope="module")
def app() -> FastAPI:
    """The app of the default settings, for the tests that only send it requests or read its routes:
    building one takes about half a second of CPU. A test that adds routes builds its own."""
    return create_app(make_settings())


RAISED_DETAIL = "boom at /srv/popagent/db.py: SELECT secret_value"


def _raising(code: grpc.StatusCode) -> Callable[[], Awaitable[None]]:
    async def raise_rpc() -> None:
        raise grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), RAISED_DETAIL)

    return raise_rpc


@pytest.fixture(scope="module")
def raising_app() -> FastAPI:
    """One app with a route per gRPC status, `/raise-rpc/<status name>`, raising an AioRpcError of
    that status with `RAISED_DETAIL`, for the test that checks each status."""
    app = create_app(make_settings())
    for code in grpc.StatusCode:
        app.add_api_route(f"/raise-rpc/{code.name}", _raising(code), methods=["GET"])
    return app


def test_every_api_route_depends_on_the_api_key_check(app: FastAPI) -> None:
    routes = api_routes(app)
    assert routes, "the inventory found no /api routes"
    lacking = [
        f"{sorted(r.methods or ())} {r.path}"
        for r in routes
        if not _depends_on(r._effective_route.dependant, require_api_key)  # type: ignore[union-attr]
    ]
    assert lacking == []


def test_every_api_route_refuses_missing_empty_wrong_and_wrong_case_keys(app: FastAPI) -> None:
    with TestClient(app) as client:
        for route in api_routes(app):
            path = (route.path or "").replace("{", "").replace("}", "")
            for method in route.methods or ():
                for headers in ({}, {"x-popagent-key": ""}, {"x-popagent-key": "k" * 31}, {"x-popagent-key": "K" * 32}):
                    response = client.request(method, path, headers=headers)
                    assert response.status_code == 401, (method, path, headers, response.text)
                    assert response.json() == {"error": "missing or wrong x-popagent-key"}


def test_api_key_shorter_than_16_characters_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="at least 16"):
        make_settings(POPAGENT_API_KEY="short")


def test_bodies_over_the_cap_are_refused_with_413_before_any_route_runs() -> None:
    app = create_app(make_settings(POPAGENT_MAX_BODY_BYTES=2048))
    received: list[int] = []

    @app.post("/echo-size")
    async def echo_size(request: Request) -> dict[str, int]:
        received.append(len(await request.body()))
        return {"size": received[-1]}

    with TestClient(app) as client:
        assert client.post("/echo-size", content=b"z" * 2048).json() == {"size": 2048}
        declared = client.post("/echo-size", content=b"x" * 4096, headers={"x-popagent-key": API_KEY})
        assert declared.status_code == 413
        assert "exceeds 2048 bytes" in declared.json()["error"]

        def chunks():  # no Content-Length: the cap is enforced while reading
            for _ in range(4):
                yield b"y" * 1024

        streamed = client.post("/echo-size", content=chunks())
        assert streamed.status_code == 413
    assert received == [2048]


def test_errors_map_through_the_one_table() -> None:
    app = create_app(make_settings())

    @app.get("/raise-not-found")
    async def raise_not_found() -> None:
        raise NotFound("no such session")

    @app.get("/raise-rpc")
    async def raise_rpc() -> None:
        raise grpc.aio.AioRpcError(grpc.StatusCode.ALREADY_EXISTS, grpc.aio.Metadata(), grpc.aio.Metadata(), "dup")

    @app.get("/raise-internal-rpc")
    async def raise_internal_rpc() -> None:
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(), "secret stack trace"
        )

    with TestClient(app) as client:
        assert client.get("/raise-not-found").status_code == 404
        assert client.get("/raise-not-found").json() == {"error": "no such session"}
        assert client.get("/raise-rpc").status_code == 409
        internal = client.get("/raise-internal-rpc")
        assert internal.status_code == 500
        assert "secret" not in internal.text


def test_status_table_covers_every_grpc_code() -> None:
    assert set(HTTP_STATUS_BY_GRPC_CODE) == set(grpc.StatusCode)
    assert set(EDGE_STATUS_BY_GRPC_CODE) == set(grpc.StatusCode)


def test_a_service_that_stops_calls_under_overload_is_503_with_retry_after_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 23, finding 6: overload answered the undocumented 499 {"error": "CANCELLED"}, unlogged."""
    app = create_app(make_settings())

    @app.get("/api/overloaded")
    async def overloaded() -> None:
        raise grpc.aio.AioRpcError(grpc.StatusCode.CANCELLED, grpc.aio.Metadata(), grpc.aio.Metadata(), "CANCELLED")

    with caplog.at_level("WARNING", logger="popagent_gateway.errors"), TestClient(app) as client:
        answers = [client.get("/api/overloaded", headers={"x-popagent-key": API_KEY}) for _ in range(50)]
    assert {answer.status_code for answer in answers} == {503}
    assert {answer.headers["retry-after"] for answer in answers} == {"5"}
    assert all("overloaded" in answer.json()["error"] for answer in answers)
    logged = [record for record in caplog.records if "CANCELLED" in record.getMessage()]
    assert len(logged) == 1


def test_every_status_the_table_can_produce_is_documented_on_every_api_route() -> None:
    """Each /api route forwards to a service (or, for health, at least checks the key), so each
    can answer any status of the kernel's table; 429, 501 and 504 were once reachable and undocumented."""
    from popagent_gateway.openapi import document

    producible = {status for status in EDGE_STATUS_BY_GRPC_CODE.values() if status >= 400}
    assert {429, 501, 504} <= producible
    assert 499 not in producible
    edge = {401, 413, 422}
    paths = document()["paths"]
    assert isinstance(paths, dict)
    operations = [
        (method, path, operation)
        for path, item in paths.items()
        if path.startswith("/api/")
        for method, operation in item.items()
    ]
    assert len(operations) > 40
    for method, path, operation in operations:
        if path in KEYLESS_API_PATHS:
            # A browser's page, not the API's JSON: its refusals are HTML pages saying what failed.
            assert "text/html" in operation["responses"]["400"]["content"], path
            continue
        documented = {int(status) for status in operation["responses"]}
        missing = (producible | edge) - documented
        assert not missing, f"{method.upper()} {path} does not document {sorted(missing)}"
        for status in producible | edge:
            answer = operation["responses"][str(status)]
            # ErrorOut, or a route's own richer shape (the 409 of a stale save carries the server copy; a
            # chat's 409 is the running turn or the error), always named schemas.
            schema = answer["content"]["application/json"]["schema"]
            refs = [choice.get("$ref", "") for choice in schema.get("anyOf", schema.get("oneOf", [schema]))]
            assert refs and all(ref.startswith("#/components/schemas/") for ref in refs), (method, path, status, schema)
            assert answer["description"]


@pytest.mark.parametrize("code", list(grpc.StatusCode))
def test_one_function_decides_what_a_client_sees_of_every_status(raising_app: FastAPI, code: grpc.StatusCode) -> None:
    """The JSON error, the error inside a started stream and a gateway-raised error all go through
    `client_message`: every status the table maps to 500 hides its detail, a dependency failure
    (503, 504) shows its status text instead, every other shows it."""
    status = EDGE_STATUS_BY_GRPC_CODE[code]
    shown = "internal error" if status == 500 else DEPENDENCY_TEXTS.get(code, RAISED_DETAIL)
    assert client_message(code, RAISED_DETAIL) == shown
    if code is grpc.StatusCode.OK:
        return
    with TestClient(raising_app) as client:
        answer = client.get(f"/raise-rpc/{code.name}")
    assert (answer.status_code, answer.json()) == (status, {"error": shown})
    assert answer.headers.get("retry-after") == ("5" if status == 503 else None)


def test_a_gateway_bug_answers_the_documented_500_shape_without_its_text() -> None:
    app = create_app(make_settings())

    @app.get("/raise-bug")
    async def raise_bug() -> None:
        raise RuntimeError("secret internals")

    @app.get("/raise-internal")
    async def raise_internal() -> None:
        raise PopagentError("secret internals too")

    with TestClient(app, raise_server_exceptions=False) as client:
        bug = client.get("/raise-bug")
        internal = client.get("/raise-internal")
    assert (bug.status_code, bug.json()) == (500, {"error": "internal error"})
    assert (internal.status_code, internal.json()) == (500, {"error": "internal error"})


def test_health_reports_503_and_the_failing_components_when_nothing_is_up(app: FastAPI) -> None:
    with TestClient(app) as client:
        response = client.get("/api/health", headers={"x-popagent-key": API_KEY})
    assert response.status_code == 503
    body = response.json()
    assert body["ok"] is False
    assert body["components"]["postgres"]["ok"] is False
    assert body["components"]["service:hooks"] == {"ok": False, "detail": "not serving"}


def test_the_built_ui_is_public_at_the_root_while_api_routes_keep_the_key(tmp_path: Path) -> None:
    (tmp_path / "assets").mkdir()
    (tmp_path / "index.html").write_text("<!doctype html><title>popagent</title>")
    (tmp_path / "assets" / "app.js").write_text("console.log('popagent')")
    app = create_app(make_settings(POPAGENT_UI_DIR=str(tmp_path)))
    with TestClient(app) as client:
        page = client.get("/")
        assert page.status_code == 200
        assert "<title>popagent</title>" in page.text
        assert client.get("/assets/app.js").status_code == 200
        assert client.get("/api/health").status_code == 401


@pytest.mark.parametrize("built", [True, False])
def test_wrong_methods_on_api_routes_are_405_with_the_routes_methods_not_the_static_mounts(
    tmp_path: Path, built: bool
) -> None:
    """Issue 23, finding 7: with the UI built, its mount answered `DELETE /api/sessions` with
    404 and `Allow: GET, HEAD`; an unknown /api path is a JSON 404 either way."""
    if built:
        (tmp_path / "index.html").write_text("<!doctype html><title>popagent</title>")
    app = create_app(make_settings(POPAGENT_UI_DIR=str(tmp_path)))
    key = {"x-popagent-key": API_KEY}
    with TestClient(app) as client:
        wrong = client.delete("/api/sessions", headers=key)
        assert wrong.status_code == 405, wrong.text
        allow = set(wrong.headers["allow"].replace(" ", "").split(","))
        # The mount names every method of the path; FastAPI's own router those of its first route.
        assert allow == {"GET", "POST"} if built else allow <= {"GET", "POST"} and allow
        assert wrong.json() == {"error": "Method Not Allowed"}
        put_chat = client.put("/api/chat", headers=key)
        assert (put_chat.status_code, put_chat.headers["allow"]) == (405, "POST")
        unknown = client.get("/api/no-such-route", headers=key)
        assert (unknown.status_code, unknown.json()) == (404, {"error": "Not Found"})
        if built:
            assert client.get("/").status_code == 200


def test_without_a_built_ui_the_root_is_not_found_and_the_api_still_works(tmp_path: Path) -> None:
    app = create_app(make_settings(POPAGENT_UI_DIR=str(tmp_path / "missing")))
    with TestClient(app) as client:
        assert client.get("/").status_code == 404
        assert client.get("/api/health").status_code == 401


def test_a_keyless_request_with_a_malformed_body_is_401_not_422(app: FastAPI) -> None:
    with TestClient(app) as client:
        response = client.put("/api/sessions/s1", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 401
    assert response.json() == {"error": "missing or wrong x-popagent-key"}


def test_framework_refusals_use_the_api_error_shape(app: FastAPI) -> None:
    with TestClient(app) as client:
        missing = client.get("/api/no-such-route", headers={"x-popagent-key": API_KEY})
        not_json = client.put(
            "/api/sessions/s1",
            content=b"\xff\xfe",
            headers={"x-popagent-key": API_KEY, "content-type": "application/json"},
        )
    assert missing.status_code == 404
    assert missing.json() == {"error": "Not Found"}
    assert not_json.status_code in (400, 422)
    assert "error" in not_json.json() and "detail" not in not_json.json()


def test_every_request_and_response_shape_lives_in_dto(app: FastAPI) -> None:
    """Routes define no models of their own: each body, query and answer comes from dto/<area>.py,
    answers as WireModel and bodies as WireInput (chat excepted: its client sends null models)."""
    import importlib
    import pkgutil

    from pydantic import BaseModel

    import popagent_gateway.routes
    from popagent_gateway.dto import WireInput, WireModel
    from popagent_gateway.dto.chat import ChatTurnCreate

    for info in pkgutil.iter_modules(popagent_gateway.routes.__path__):
        module = importlib.import_module(f"popagent_gateway.routes.{info.name}")
        own = [
            name
            for name, value in vars(module).items()
            if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == module.__name__
        ]
        assert not own, f"routes/{info.name}.py defines {own}: move them to dto/"

    checked = 0
    for context in api_routes(app):
        route = context.original_route
        assert isinstance(route, APIRoute)
        answer = route.response_model
        if isinstance(answer, type) and route.path != "/api/health":
            assert issubclass(answer, WireModel), (route.path, answer)
            checked += 1
        body = route.body_field.field_info.annotation if route.body_field else None
        if isinstance(body, type) and body is not ChatTurnCreate:
            assert issubclass(body, WireInput), (route.path, body)
            checked += 1
    assert checked > 40


# The unary calls that may outlast POPAGENT_GATEWAY_RPC_TIMEOUT_S, by route module, each said why
# beside its constant: permanent deletions that run session lifecycles, embedding a document,
# a browser screenshot or tab close, and health's probe, which answers sooner than the deadline.
OWN_DEADLINES = {
    ("browser", "SCREENSHOT_TIMEOUT_S"),
    ("documents", "EMBEDDING_TIMEOUT_S"),
    ("health", "5"),
    ("sessions", "DELETE_TIMEOUT_S"),
    ("workspaces", "DELETE_SESSIONS_TIMEOUT_S"),
}


def test_unary_calls_take_the_one_rpc_deadline_unless_listed_as_longer() -> None:
    """The channels give every unary call POPAGENT_GATEWAY_RPC_TIMEOUT_S; a route module that sets a
    `timeout=` of its own on an RPC (a CamelCase stub method) is one of the listed longer waits."""
    import ast

    import popagent_gateway.routes

    found: set[tuple[str, str]] = set()
    for module_path in sorted(Path(popagent_gateway.routes.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(module_path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if not node.func.attr[:1].isupper():
                continue
            found.update((module_path.stem, ast.unparse(k.value)) for k in node.keywords if k.arg == "timeout")
    assert found == OWN_DEADLINES


@pytest.mark.parametrize("disabled", ["", "true"])
def test_a_request_gets_a_server_span_unless_tracing_is_off(monkeypatch: pytest.MonkeyPatch, disabled: str) -> None:
    """OTEL_SDK_DISABLED=true builds the app without the tracing middleware (it would run for every
    request, recording nothing); the test process's provider records what the middleware makes."""
    monkeypatch.setenv("OTEL_SDK_DISABLED", disabled)
    app = create_app(make_settings())
    with collecting_spans() as spans, TestClient(app) as client:
        assert client.get("/api/sessions").status_code == 401
    served = [s.name for s in spans.all() if s.kind is SpanKind.SERVER and "/api/sessions" in s.name]
    assert served == ([] if disabled else ["GET /api/sessions"])
