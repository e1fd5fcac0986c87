"""OpenAPI links: what a created resource leads to, so clients and stateful testing (Schemathesis'
stateful phase) follow them instead of guessing ids."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

SESSION_ID = "$response.body#/id"

# (from: method, path, status) -> {link name: (method, path, parameters, request body)}
LINKS: dict[tuple[str, str, str], dict[str, tuple[str, str, dict[str, str], Any]]] = {
    ("post", "/api/sessions", "201"): {
        "GetSession": ("get", "/api/sessions/{session_id}", {"session_id": SESSION_ID}, None),
        "SaveSession": ("put", "/api/sessions/{session_id}", {"session_id": SESSION_ID}, None),
        "UpdateSession": ("patch", "/api/sessions/{session_id}", {"session_id": SESSION_ID}, None),
        "SessionHookRuns": ("get", "/api/sessions/{session_id}/hooks", {"session_id": SESSION_ID}, None),
        "DeleteSession": ("delete", "/api/sessions/{session_id}", {"session_id": SESSION_ID}, None),
        "Chat": ("post", "/api/chat", {}, {"id": SESSION_ID}),
    },
}


def add_links(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with LINKS set on the responses they start from (by operationId)."""
    paths = document.get("paths", {})
    for (method, path, status), links in LINKS.items():
        response = paths[path][method]["responses"][status]
        built: dict[str, Any] = {}
        for name, (target_method, target_path, parameters, body) in links.items():
            link: dict[str, Any] = {"operationId": paths[target_path][target_method]["operationId"]}
            if parameters:
                link["parameters"] = parameters
            if body is not None:
                link["requestBody"] = body
            built[name] = link
        response["links"] = built
    return document


def install_links(app: FastAPI) -> None:
    """Serve the app's OpenAPI document with LINKS (built once, as FastAPI caches its own)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = add_links(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
