"""The OpenAPI document the UI is typed from: the export script prints what the live app serves."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx

from support.stacks import Stack


async def test_the_export_script_prints_the_live_document(api_stack: Stack) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "popagent_gateway.openapi", stdout=asyncio.subprocess.PIPE
    )
    exported, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0
    async with httpx.AsyncClient(base_url=api_stack.url) as client:
        live = (await client.get("/openapi.json")).json()
    document = json.loads(exported)
    assert document == live
    schemas = document["components"]["schemas"]
    # Wire DTOs are camelCase, request bodies closed, and the key is a declared security scheme.
    assert "titleLocked" in schemas["SessionSummary"]["properties"]
    assert schemas["SessionSave"]["additionalProperties"] is False
    assert schemas["AgentRuntimeSettingsPatch"]["minProperties"] == 1
    assert document["components"]["securitySchemes"]["popagentKey"]["name"] == "x-popagent-key"
    assert document["paths"]["/api/sessions/{session_id}"]["put"]["responses"]["409"]


def test_a_created_session_links_to_its_chat_hooks_and_delete() -> None:
    """Issue 23, finding 7: stateful clients (and Schemathesis' stateful phase) follow links."""
    from popagent_gateway.openapi import document

    paths: Any = document()["paths"]
    links = paths["/api/sessions"]["post"]["responses"]["201"]["links"]
    ids = {
        operation["operationId"]: (method, path) for path, item in paths.items() for method, operation in item.items()
    }
    targets = {name: ids[link["operationId"]] for name, link in links.items()}
    assert targets["Chat"] == ("post", "/api/chat")
    assert links["Chat"]["requestBody"] == {"id": "$response.body#/id"}
    assert targets["SessionHookRuns"] == ("get", "/api/sessions/{session_id}/hooks")
    assert targets["DeleteSession"] == ("delete", "/api/sessions/{session_id}")
    for name in ("GetSession", "SaveSession", "UpdateSession", "SessionHookRuns", "DeleteSession"):
        assert links[name]["parameters"] == {"session_id": "$response.body#/id"}


def test_chat_declares_its_sse_answer() -> None:
    from popagent_gateway.openapi import document

    paths: Any = document()["paths"]
    ok = paths["/api/chat"]["post"]["responses"]["200"]
    assert list(ok["content"]) == ["text/event-stream"]
    assert ok["headers"]["x-vercel-ai-ui-message-stream"]["schema"]["enum"] == ["v1"]
    assert (
        "RunningTurnOut"
        in paths["/api/chat"]["post"]["responses"]["409"]["content"]["application/json"]["schema"]["$ref"]
    )
